"""The synchronous engine: admits requests, runs one batched step at a time, emits outputs.

One step = schedule (scheduler.py) -> build the flattened batch -> model forward over the paged
cache -> sample -> detokenize -> retire finished sequences. Evicted cached blocks go to the KV
tier store when one is attached; prefix hits there are loaded back instead of recomputed.

A request can fail only itself. When a batched forward raises, the step runs each scheduled
sequence alone; those that still fail are retired with an error output (`RequestOutput.error`)
and the rest carry on with the logits of their own forward. A row that cannot be sampled, or
whose token cannot be appended, fails the same way. Only a failure outside any one request's
work (the scheduler itself) escapes `step()`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.core.counters import EngineCounters
from strata.engine import kernels, packed_linear
from strata.engine.attention import (
    AttentionMetadata,
    SeqSlice,
    kv_cache_shape,
    load_rotary_kernel,
)
from strata.engine.block_pool import BlockPool
from strata.engine.block_tables import BlockTables
from strata.engine.compute_dtype import auto_dtype
from strata.engine.costs import CostModel
from strata.engine.detokenizer import Detokenizer
from strata.engine.host_memory import keep_freed_buffers
from strata.engine.loaded import LoadedModel
from strata.engine.model import build_model
from strata.engine.model import load_kernels as load_model_kernels
from strata.engine.quant import QuantLayer
from strata.engine.quant import native as quant_native
from strata.engine.sampler import (
    Sampled,
    SamplingError,
    SeqSampler,
    load_row_max_kernel,
    sample_batch,
)
from strata.engine.scheduler import ScheduledSeq, Scheduler
from strata.engine.sequence import FinishReason, SamplingParams, Sequence
from strata.engine.sparse import native as sparse_native
from strata.engine.sparse.config import SparseConfig
from strata.engine.sparse.decode import SparseDecoder, SparseStats
from strata.engine.tier_link import TierLink
from strata.kvtier.hashing import HashKeys, chain_hashes

log = logging.getLogger(__name__)


@dataclass(slots=True)
class EngineConfig:
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_cache_bytes: int = 256 * 1024 * 1024
    num_blocks: int = 0  # 0 = derive from kv_cache_bytes
    max_batched_tokens: int = 2048
    max_seqs: int = 32
    device: str = "cpu"
    # the activations', float weights' and KV cache's dtype; "auto": the checkpoint's own, and
    # for quantized weights bfloat16 where the device computes it natively (compute_dtype)
    dtype: str = "auto"
    attention_kernel: str = "cpp"  # cpp: fused CPU decode kernel when it builds; torch: never
    # Quantized checkpoint weights (GGUF Q4_0/Q4_1/Q4_K/Q8_0) stay quantized on the CPU and are
    # multiplied directly; False widens them to `dtype` at load.
    quantized_weights: bool = True
    # The long-context sparse decode path; None: no context index, every row attends densely.
    sparse: SparseConfig | None = None

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a positive power of two, got {self.block_size}")
        if self.max_batched_tokens < self.block_size:
            raise ValueError(
                f"max_batched_tokens ({self.max_batched_tokens}) must be at least "
                f"block_size ({self.block_size})"
            )
        if self.attention_kernel not in ("cpp", "torch"):
            raise ValueError(
                f"attention_kernel must be 'cpp' or 'torch', got {self.attention_kernel!r}"
            )
        if self.dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(
                f"dtype must be auto, float32, float16 or bfloat16, got {self.dtype!r}"
            )


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    tenant: str = ""
    prefix_public: bool = False
    priority: int = 0
    kv_source: str = ""  # a peer node's KV tier store holding a longer prefix (routing hint)
    # Failover resume: the last num_resumed prompt ids are output another worker streamed before
    # it failed (params.max_tokens already excludes them); they count as output in usage.
    num_resumed: int = 0
    sparse: bool | None = None  # the sparse decode path; None: EngineConfig.sparse.enabled
    tpot_ms: float | None = None  # its class's TPOT target, for the step budget (None: none)


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tier_tokens: int = 0
    queue_ms: float = 0.0
    logprobs: list[Sampled] | None = None
    sparse_layer_steps: int = 0  # on the finished output: layers run sparse for this request
    sparse_fallbacks: int = 0  # of them, those the trust check sent to full attention
    # Set on a finished output when the engine could not compute this request (it alone was
    # retired; finish_reason is None): what went wrong, in a sentence.
    error: str | None = None


class LLMEngine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig, tier: TierLink | None = None):
        self.loaded = loaded
        self.config = config
        self.model_name = loaded.config.name
        self.tokenizer = loaded.tokenizer
        self.device = torch.device(config.device)
        if self.device.type == "cpu":
            keep_freed_buffers()  # a step's megabyte temporaries reused, not page-faulted anew
        self._tables = BlockTables(self.device)  # block tables kept across steps
        self.dtype = (
            auto_dtype(loaded, self.device)
            if config.dtype == "auto"
            else getattr(torch, config.dtype)
        )
        cfg = loaded.config
        self.model = build_model(
            cfg,
            loaded.weights,
            self.device,
            self.dtype,
            config.quantized_weights,
        )
        self.kv_bytes_per_token = cfg.kv_bytes_per_token(torch.finfo(self.dtype).bits // 8)
        per_block = self.kv_bytes_per_token * config.block_size
        num_blocks = config.num_blocks or max(1, config.kv_cache_bytes // per_block)
        self.kv = torch.zeros(
            kv_cache_shape(
                cfg.num_layers, cfg.num_kv_heads, num_blocks, config.block_size, cfg.head_dim
            ),
            device=self.device,
            dtype=self.dtype,
        )
        self.tier = tier
        if tier is not None:
            tier.attach(self.kv)
        self.sparse = (
            SparseDecoder(
                config.sparse,
                cfg.num_layers,
                cfg.num_kv_heads,
                num_blocks,
                config.block_size,
                cfg.head_dim,
                self.device,
                self.dtype,
            )
            if config.sparse is not None
            else None
        )
        on_commit: Callable[[int, int], None] | None = tier.committed if tier is not None else None
        if self.sparse is not None:
            on_commit = self.sparse.commit_hook(on_commit)
        self.pool = BlockPool(
            num_blocks,
            config.block_size,
            on_evict=tier.offload if tier is not None else None,
            clock=time.monotonic,
            on_commit=on_commit,
        )
        if tier is not None:
            tier.pool = self.pool
        self.scheduler = Scheduler(self.pool, config.max_batched_tokens, config.max_seqs, tier=tier)
        self.costs = tier.costs if tier is not None else CostModel()
        self.max_context = cfg.max_position_embeddings
        # Built (or loaded from its cache) now, so a first compile never lands on a request.
        self.native_attention = (
            config.attention_kernel == "cpp"
            and self.device.type == "cpu"
            and kernels.load() is not None
        )
        if self.native_attention:
            self._build_kernels()
        self.stats = EngineCounters()  # what the engine itself counts; counters() adds the rest
        self.last_step_tokens = 0
        # Called after every step with its scheduled items (already advanced), the whole
        # step's seconds (schedule() included, as a profile times it) and its period: the
        # seconds since the previous step ended while the engine stayed busy, which is how
        # often a running stream gets a token (the step's seconds after idle()); see
        # strata.engine.step_meter.
        self.step_observer: Callable[[list[ScheduledSeq], float, float], None] | None = None
        # Called before every step with the running sequences: the step's token budget (at most
        # max_batched_tokens; None: that). The worker sizes prefill chunks by TPOT targets.
        self.step_budget: Callable[[list[Sequence], Iterable[Sequence]], int] | None = None
        self._last_step_end: float | None = None  # None: idle since (no period to measure)
        self._samplers: dict[str, SeqSampler] = {}
        self._detok: dict[str, Detokenizer] = {}
        self._seqs: dict[str, Sequence] = {}

    def _build_kernels(self) -> None:
        """Build (or load from the cache) every other CPU kernel this engine's steps may call:
        the norms, SwiGLU, decode-layers, rotary and greedy ones; the bfloat16 row product for
        bfloat16 weights, the float32 one for float32 weights where it serves (packed_linear.
        F32_ROWS); the quantized and sparse ones where the model and config use them. A
        first compile takes seconds, and would otherwise land on the first step that needs it."""
        load_model_kernels()
        load_rotary_kernel()
        load_row_max_kernel()
        if self.dtype == torch.bfloat16:
            packed_linear.load_row_kernel()
        if self.dtype == torch.float32 and packed_linear.F32_ROWS:
            packed_linear.load_f32_kernel()
        if any(isinstance(layer, QuantLayer) for layer in self.model.modules()):
            quant_native.load()
        if self.sparse is not None:
            sparse_native.load()

    def weights_size(self) -> tuple[int, int]:
        """(parameters, bytes) of the model's weights as held (tied weights once; a quantized
        matrix counts its weights as parameters and its packed bytes, scales and offsets as
        bytes): what every step reads."""
        held = list(self.model.parameters())
        params = sum(p.numel() for p in held)
        size = sum(p.numel() * p.element_size() for p in held)
        for layer in self.model.modules():
            if isinstance(layer, QuantLayer):
                rows, cols = layer.weight_q.shape
                params += rows * cols
                size += layer.weight_q.nbytes
        return params, size

    def warm_up(self) -> float:
        """Run the step shapes serving will see once, before serving: a full token budget of
        prefill, then a full batch of decodes (vLLM's start-up profile run does the same), so
        that the first requests do not pay for kernel selection on new matrix shapes
        (docs/design/engine.md). Returns the seconds it took."""
        started = time.perf_counter()
        budget = self.config.max_batched_tokens
        seqs = max(1, min(self.config.max_seqs, self.pool.num_blocks // 4))
        prompt = max(1, min(budget // seqs, 2 * self.config.block_size, self.max_context - 8))
        gen = torch.Generator().manual_seed(0)
        for i in range(seqs):
            ids = torch.randint(0, self.loaded.config.vocab_size, (prompt,), generator=gen)
            self.add_request(
                EngineRequest(
                    f"__warmup-{i}",
                    ids.tolist(),
                    SamplingParams(max_tokens=4, ignore_eos=True),
                    tenant="__warmup__",
                )
            )
        while self.has_work():
            self.step()
        self.stats = EngineCounters()
        if self.sparse is not None:
            self.sparse.stats = SparseStats()
        return time.perf_counter() - started

    def counters(self) -> EngineCounters:
        """Every cumulative counter of this engine: its own, its scheduler's preemptions, its
        pool's evictions and the sparse path's steps (the step meter's are the worker's)."""
        c = EngineCounters(**{k: getattr(self.stats, k) for k in EngineCounters.__slots__})
        c.preemptions = self.scheduler.preemptions
        c.priority_preemptions = self.scheduler.priority_preemptions
        c.kv_blocks_evicted = self.pool.evicted_lifetimes_count
        c.block_lifetime_sum_s = self.pool.evicted_lifetime_sum_s
        if self.sparse is not None:
            c.sparse_layer_steps = self.sparse.stats.layer_steps
            c.sparse_fallbacks = self.sparse.stats.fallbacks
        return c

    # -- requests ------------------------------------------------------------------------------
    def validate(self, req: EngineRequest) -> None:
        """Raise ValueError with a sentence the caller can act on."""
        n = len(req.prompt_ids)
        if n == 0:
            raise ValueError("the prompt is empty after tokenization")
        if req.params.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {req.params.max_tokens}")
        vocab = self.loaded.config.vocab_size
        bad = next((t for t in req.prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(
                f"prompt token id {bad} is outside the model's vocabulary (0-{vocab - 1})"
            )
        if n + req.params.max_tokens > self.max_context:
            raise ValueError(
                f"prompt ({n} tokens) plus max_tokens ({req.params.max_tokens}) "
                f"exceeds the model's context of {self.max_context} tokens"
            )
        need = -(-(n + req.params.max_tokens) // self.config.block_size)
        if need > self.pool.num_blocks:
            raise ValueError(
                f"the request needs {need} KV blocks but this worker has "
                f"{self.pool.num_blocks}; shorten the prompt or max_tokens"
            )
        if req.request_id in self._seqs:
            raise ValueError(f"request id {req.request_id!r} is already running")
        if req.sparse and self.sparse is None:
            raise ValueError(
                "this worker runs without the sparse decode path; leave the "
                "request's sparse mode at its default or turn it off"
            )

    def add_request(self, req: EngineRequest) -> None:
        self.validate(req)
        seq = Sequence(
            request_id=req.request_id,
            token_ids=list(req.prompt_ids),
            num_prompt=len(req.prompt_ids),
            params=req.params,
            hash_keys=HashKeys.for_request(self.model_name, req.tenant, req.prefix_public),
            priority=req.priority,
            arrival=time.monotonic(),
            num_resumed=req.num_resumed,
            tpot_ms=req.tpot_ms,
        )
        self._seqs[req.request_id] = seq
        # Resumed tokens are output for the penalties and the detokenizer, as they were before.
        self._samplers[req.request_id] = SeqSampler(
            req.params, len(req.prompt_ids) - req.num_resumed
        )
        detok = Detokenizer(self.tokenizer, req.params.stop)
        if req.num_resumed:
            detok.prime(req.prompt_ids[len(req.prompt_ids) - req.num_resumed :])
        self._detok[req.request_id] = detok
        if self.sparse is not None:
            self.sparse.register(req.request_id, req.sparse)
        self.scheduler.add(seq)
        if self.tier is not None:
            self._prefetch(self.tier, seq, req.kv_source)

    def _prefetch(self, tier: TierLink, seq: Sequence, peer: str) -> None:
        """Ask the tier store (through tier, the engine's link) for the part of the prompt's
        prefix the device pool lacks now."""
        missing = self.pool.missing_suffix(
            chain_hashes(
                seq.token_ids[: len(seq.token_ids) - 1], self.config.block_size, seq.hash_keys
            )
        )
        if missing:
            tier.prefetch(missing, peer)

    def abort(self, request_id: str) -> bool:
        seq = self._seqs.get(request_id)
        if seq is None:
            return False
        self.scheduler.finish(seq, FinishReason.ABORTED)
        self._forget(request_id)
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def queued_by_class(self) -> dict[int, int]:
        return self.scheduler.queued_by_class()

    # -- one step ------------------------------------------------------------------------------
    def idle(self) -> None:
        """The engine's driver is about to wait for work: the next step's period starts with
        it, not with the step before the wait."""
        self._last_step_end = None

    def step(self) -> list[RequestOutput]:
        begun = time.perf_counter()
        budget = (
            None
            if self.step_budget is None
            else self.step_budget(self.scheduler.running, self.scheduler.waiting)
        )
        plan = self.scheduler.schedule(budget)
        if not plan.scheduled:
            self._last_step_end = None
            return []
        started = time.perf_counter()
        now = time.monotonic()
        for item in plan.scheduled:
            if item.seq.first_scheduled is None:
                item.seq.first_scheduled = now
        logits, scheduled, outputs = self._forward_isolating(plan.scheduled)
        for item in scheduled:
            self.scheduler.advance(item)
        sampling = [item.seq for item in scheduled if item.sample]
        picks = sample_batch(
            logits,
            [self._samplers[s.request_id] for s in sampling],
            [s.token_ids for s in sampling],
        )
        for seq, pick in zip(sampling, picks):
            outputs.append(
                self._fail(seq, pick)
                if isinstance(pick, SamplingError)
                else self._append_isolated(seq, pick)
            )
        elapsed = time.perf_counter() - started
        self.costs.observe_step(plan.num_tokens, elapsed)
        self.stats.busy_seconds += elapsed
        self.stats.steps += 1
        self.stats.step_tokens += plan.num_tokens
        self.stats.step_token_budget += self.config.max_batched_tokens
        self.last_step_tokens = plan.num_tokens
        ended = time.perf_counter()
        period_from = begun if self._last_step_end is None else self._last_step_end
        self._last_step_end = ended
        if self.step_observer is not None:
            self.step_observer(plan.scheduled, ended - begun, ended - period_from)
        return outputs

    def _forward_isolating(
        self, scheduled: list[ScheduledSeq]
    ) -> tuple[torch.Tensor, list[ScheduledSeq], list[RequestOutput]]:
        """The step's logits, the items they cover (in order), and the error outputs of items
        that failed: the batch at once, or, when that raises, each item on its own."""
        try:
            return self._forward(scheduled), scheduled, []
        except Exception as err:  # noqa: BLE001 - which request caused it is found out below
            if len(scheduled) == 1:
                return self._no_logits(), [], [self._fail(scheduled[0].seq, err)]
            log.warning(
                "a batched step of %d sequences failed (%s: %s); running each alone",
                len(scheduled),
                type(err).__name__,
                err,
            )
        kept: list[ScheduledSeq] = []
        rows: list[torch.Tensor] = []
        failed: list[RequestOutput] = []
        for item in scheduled:
            try:
                logits = self._forward([item], keep_tables=False)
            except Exception as err:  # noqa: BLE001 - this request alone fails
                failed.append(self._fail(item.seq, err))
                continue
            kept.append(item)
            rows.append(logits)
        return (torch.cat(rows) if rows else self._no_logits()), kept, failed

    def _no_logits(self) -> torch.Tensor:
        return torch.empty(0, self.loaded.config.vocab_size, device=self.device)

    def _fail(self, seq: Sequence, err: BaseException) -> RequestOutput:
        """Retire `seq` because the engine could not compute it; its error output."""
        rid = seq.request_id
        if isinstance(err, SamplingError):
            log.error("request %s failed: %s", rid, err)
            reason = str(err)
        else:
            log.error("request %s failed in the engine", rid, exc_info=err)
            reason = f"the engine failed on this request ({type(err).__name__}: {err})"
        self.scheduler.finish(seq, FinishReason.ABORTED)
        self._forget(rid)
        return RequestOutput(
            request_id=rid,
            text="",
            token_ids=[],
            finished=True,
            prompt_tokens=seq.num_prompt - seq.num_resumed,
            completion_tokens=seq.num_output + seq.num_resumed,
            error=reason,
        )

    def _append_isolated(self, seq: Sequence, pick: Sampled) -> RequestOutput:
        try:
            return self._append(seq, pick)
        except Exception as err:  # noqa: BLE001 - e.g. a token its detokenizer cannot decode
            return self._fail(seq, err)

    def _forward(self, scheduled: list[ScheduledSeq], keep_tables: bool = True) -> torch.Tensor:
        ids: list[int] = []
        positions: list[int] = []
        slices: list[SeqSlice] = []
        logits_rows: list[int] = []
        for item in scheduled:
            seq, start = item.seq, len(ids)
            first = seq.num_computed
            ids.extend(seq.token_ids[first : first + item.num_new])
            positions.extend(range(first, first + item.num_new))
            slices.append(SeqSlice(start, item.num_new, first + item.num_new, seq.block_ids))
            if item.sample:
                logits_rows.append(start + item.num_new - 1)
        dev = self.device
        # A sequence run alone (isolating a failed batch) must not replace the kept tables.
        meta = AttentionMetadata.build(
            slices,
            self.config.block_size,
            dev,
            self.native_attention,
            self._tables if keep_tables else None,
        )
        if self.sparse is not None:
            decodes = meta.groups[0] if meta.groups and meta.groups[0].queries == 1 else None
            meta.sparse = self.sparse.plan(
                self.kv,
                [i.seq.request_id for i in scheduled],
                slices,
                decodes,
                self.native_attention,
            )
        return self.model(
            torch.tensor(ids, dtype=torch.int64, device=dev),
            torch.tensor(positions, dtype=torch.int64, device=dev),
            self.kv,
            meta,
            torch.tensor(logits_rows, dtype=torch.int64, device=dev),
        )

    def _append(self, seq: Sequence, pick: Sampled) -> RequestOutput:
        rid = seq.request_id
        token = pick.token_id
        seq.token_ids.append(token)
        if seq.first_token_at is None:
            seq.first_token_at = time.monotonic()
        p = seq.params
        detok = self._detok[rid]
        reason = None
        text = ""
        if (
            token in self.tokenizer.eos_token_ids and not p.ignore_eos
        ) or token in p.stop_token_ids:
            reason = FinishReason.STOP
        else:
            text = detok.add(token)
            if detok.stopped:
                reason = FinishReason.STOP
            elif seq.num_output >= p.max_tokens or len(seq.token_ids) >= self.max_context:
                reason = FinishReason.LENGTH
        sparse = None
        if reason is not None:
            text += detok.flush()
            self.stats.prefix_hit_tokens += seq.num_cached_prompt
            self.stats.tier_hit_tokens += seq.num_tier_prompt
            self.stats.prompt_tokens += seq.num_prompt
            self.scheduler.finish(seq, reason)
            if self.sparse is not None:
                sparse = self.sparse.forget(rid)
            self._forget(rid)
        return RequestOutput(
            request_id=rid,
            text=text,
            token_ids=[token],
            finished=reason is not None,
            finish_reason=reason,
            prompt_tokens=seq.num_prompt - seq.num_resumed,
            completion_tokens=seq.num_output + seq.num_resumed,
            cached_tokens=seq.num_cached_prompt,
            tier_tokens=seq.num_tier_prompt,
            queue_ms=((seq.first_scheduled or seq.arrival) - seq.arrival) * 1000,
            logprobs=[pick] if seq.params.logprobs else None,
            sparse_layer_steps=sparse.layer_steps if sparse is not None else 0,
            sparse_fallbacks=sparse.fallbacks if sparse is not None else 0,
        )

    def _forget(self, request_id: str) -> None:
        if self.sparse is not None:
            self.sparse.forget(request_id)
        self._seqs.pop(request_id, None)
        self._samplers.pop(request_id, None)
        self._detok.pop(request_id, None)
