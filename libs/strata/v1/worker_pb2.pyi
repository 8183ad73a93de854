from strata.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerGenerateRequest(_message.Message):
    __slots__ = ("request_id", "tenant", "priority", "spec", "kv_source_address", "resume_output_ids", "tpot_ms", "ttft_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    KV_SOURCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESUME_OUTPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    priority: int
    spec: _common_pb2.GenerationSpec
    kv_source_address: str
    resume_output_ids: _containers.RepeatedScalarFieldContainer[int]
    tpot_ms: float
    ttft_ms: float
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., priority: _Optional[int] = ..., spec: _Optional[_Union[_common_pb2.GenerationSpec, _Mapping]] = ..., kv_source_address: _Optional[str] = ..., resume_output_ids: _Optional[_Iterable[int]] = ..., tpot_ms: _Optional[float] = ..., ttft_ms: _Optional[float] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStats(_message.Message):
    __slots__ = ("model", "running_requests", "waiting_requests", "kv_blocks_total", "kv_blocks_free", "kv_blocks_cached", "prefix_hit_tokens", "tier_hit_tokens", "blocks_offloaded", "queued_tokens", "context_length", "memory_bytes", "steps", "step_tokens", "step_token_budget", "preemptions", "busy_seconds", "prompt_tokens", "max_batched_tokens", "kv_blocks_evicted", "block_lifetime_sum_s", "block_lifetime_p50_s", "block_lifetime_p99_s", "waiting_for_memory", "tier_blocks_dropped", "prefetched_blocks", "kv_blocks_used", "step_seconds_observed", "step_seconds_solo", "max_seqs", "priority_preemptions", "prefill_tokens_per_s", "sparse_decode_rows", "sparse_layer_steps", "sparse_fallbacks", "sparse_blocks_read", "sparse_blocks_dense", "kv_block_size", "step_line", "step_line_samples", "queued_by_class", "step_allowance_ms")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_FREE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_CACHED_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIER_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_OFFLOADED_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEP_TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    BUSY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_SUM_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_P50_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_P99_S_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_MEMORY_FIELD_NUMBER: _ClassVar[int]
    TIER_BLOCKS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    PREFETCHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_OBSERVED_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_SOLO_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    SPARSE_DECODE_ROWS_FIELD_NUMBER: _ClassVar[int]
    SPARSE_LAYER_STEPS_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    SPARSE_BLOCKS_READ_FIELD_NUMBER: _ClassVar[int]
    SPARSE_BLOCKS_DENSE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_LINE_FIELD_NUMBER: _ClassVar[int]
    STEP_LINE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BY_CLASS_FIELD_NUMBER: _ClassVar[int]
    STEP_ALLOWANCE_MS_FIELD_NUMBER: _ClassVar[int]
    model: str
    running_requests: int
    waiting_requests: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_blocks_cached: int
    prefix_hit_tokens: int
    tier_hit_tokens: int
    blocks_offloaded: int
    queued_tokens: int
    context_length: int
    memory_bytes: int
    steps: int
    step_tokens: int
    step_token_budget: int
    preemptions: int
    busy_seconds: float
    prompt_tokens: int
    max_batched_tokens: int
    kv_blocks_evicted: int
    block_lifetime_sum_s: float
    block_lifetime_p50_s: float
    block_lifetime_p99_s: float
    waiting_for_memory: int
    tier_blocks_dropped: int
    prefetched_blocks: int
    kv_blocks_used: int
    step_seconds_observed: float
    step_seconds_solo: float
    max_seqs: int
    priority_preemptions: int
    prefill_tokens_per_s: float
    sparse_decode_rows: int
    sparse_layer_steps: int
    sparse_fallbacks: int
    sparse_blocks_read: int
    sparse_blocks_dense: int
    kv_block_size: int
    step_line: _containers.RepeatedScalarFieldContainer[float]
    step_line_samples: int
    queued_by_class: _containers.RepeatedCompositeFieldContainer[_common_pb2.ClassTokens]
    step_allowance_ms: float
    def __init__(self, model: _Optional[str] = ..., running_requests: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., kv_blocks_free: _Optional[int] = ..., kv_blocks_cached: _Optional[int] = ..., prefix_hit_tokens: _Optional[int] = ..., tier_hit_tokens: _Optional[int] = ..., blocks_offloaded: _Optional[int] = ..., queued_tokens: _Optional[int] = ..., context_length: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., steps: _Optional[int] = ..., step_tokens: _Optional[int] = ..., step_token_budget: _Optional[int] = ..., preemptions: _Optional[int] = ..., busy_seconds: _Optional[float] = ..., prompt_tokens: _Optional[int] = ..., max_batched_tokens: _Optional[int] = ..., kv_blocks_evicted: _Optional[int] = ..., block_lifetime_sum_s: _Optional[float] = ..., block_lifetime_p50_s: _Optional[float] = ..., block_lifetime_p99_s: _Optional[float] = ..., waiting_for_memory: _Optional[int] = ..., tier_blocks_dropped: _Optional[int] = ..., prefetched_blocks: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., step_seconds_observed: _Optional[float] = ..., step_seconds_solo: _Optional[float] = ..., max_seqs: _Optional[int] = ..., priority_preemptions: _Optional[int] = ..., prefill_tokens_per_s: _Optional[float] = ..., sparse_decode_rows: _Optional[int] = ..., sparse_layer_steps: _Optional[int] = ..., sparse_fallbacks: _Optional[int] = ..., sparse_blocks_read: _Optional[int] = ..., sparse_blocks_dense: _Optional[int] = ..., kv_block_size: _Optional[int] = ..., step_line: _Optional[_Iterable[float]] = ..., step_line_samples: _Optional[int] = ..., queued_by_class: _Optional[_Iterable[_Union[_common_pb2.ClassTokens, _Mapping]]] = ..., step_allowance_ms: _Optional[float] = ...) -> None: ...
