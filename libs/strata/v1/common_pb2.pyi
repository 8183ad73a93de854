from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORTED: _ClassVar[FinishReason]
    FINISH_REASON_ERROR: _ClassVar[FinishReason]

class SparseMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPARSE_MODE_DEFAULT: _ClassVar[SparseMode]
    SPARSE_MODE_OFF: _ClassVar[SparseMode]
    SPARSE_MODE_ON: _ClassVar[SparseMode]

class ReplicaState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICA_STATE_UNSPECIFIED: _ClassVar[ReplicaState]
    REPLICA_STATE_LOADING: _ClassVar[ReplicaState]
    REPLICA_STATE_READY: _ClassVar[ReplicaState]
    REPLICA_STATE_DRAINING: _ClassVar[ReplicaState]
    REPLICA_STATE_FAILED: _ClassVar[ReplicaState]
    REPLICA_STATE_STANDBY: _ClassVar[ReplicaState]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORTED: FinishReason
FINISH_REASON_ERROR: FinishReason
SPARSE_MODE_DEFAULT: SparseMode
SPARSE_MODE_OFF: SparseMode
SPARSE_MODE_ON: SparseMode
REPLICA_STATE_UNSPECIFIED: ReplicaState
REPLICA_STATE_LOADING: ReplicaState
REPLICA_STATE_READY: ReplicaState
REPLICA_STATE_DRAINING: ReplicaState
REPLICA_STATE_FAILED: ReplicaState
REPLICA_STATE_STANDBY: ReplicaState

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "seed", "repetition_penalty", "min_p", "frequency_penalty", "presence_penalty", "logprobs", "stop_token_ids", "ignore_eos")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    seed: int
    repetition_penalty: float
    min_p: float
    frequency_penalty: float
    presence_penalty: float
    logprobs: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., repetition_penalty: _Optional[float] = ..., min_p: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., logprobs: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "text")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    text: str
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., text: _Optional[str] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "top")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    top: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., top: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "queue_ms")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    queue_ms: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., queue_ms: _Optional[float] = ...) -> None: ...

class GenerationSpec(_message.Message):
    __slots__ = ("model", "prompt", "messages", "sampling", "max_tokens", "stop", "prefix_public", "sparse", "prompt_token_ids")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    PREFIX_PUBLIC_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    sampling: SamplingParams
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    prefix_public: bool
    sparse: SparseMode
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., prefix_public: _Optional[bool] = ..., sparse: _Optional[_Union[SparseMode, str]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerationChunk(_message.Message):
    __slots__ = ("request_id", "text", "token_ids", "finish_reason", "usage", "logprobs")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: FinishReason
    usage: Usage
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "context_length", "memory_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    context_length: int
    memory_bytes: int
    def __init__(self, name: _Optional[str] = ..., context_length: _Optional[int] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("model", "replica_id", "state", "worker_address", "running_requests", "waiting_requests", "queued_tokens", "kv_blocks_total", "kv_blocks_free", "waiting_for_memory", "tokens_per_s", "max_seqs", "kv_block_size", "step_line", "step_line_samples", "slot_requests", "slot_context_tokens", "slot_tightest_tpot_ms", "slot_turnover_s", "max_batched_tokens", "recent_delay_s", "class_delays", "queued_by_class", "step_allowance_ms")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_FREE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_MEMORY_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_LINE_FIELD_NUMBER: _ClassVar[int]
    STEP_LINE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SLOT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SLOT_CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SLOT_TIGHTEST_TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    SLOT_TURNOVER_S_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECENT_DELAY_S_FIELD_NUMBER: _ClassVar[int]
    CLASS_DELAYS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BY_CLASS_FIELD_NUMBER: _ClassVar[int]
    STEP_ALLOWANCE_MS_FIELD_NUMBER: _ClassVar[int]
    model: str
    replica_id: str
    state: ReplicaState
    worker_address: str
    running_requests: int
    waiting_requests: int
    queued_tokens: int
    kv_blocks_total: int
    kv_blocks_free: int
    waiting_for_memory: int
    tokens_per_s: float
    max_seqs: int
    kv_block_size: int
    step_line: _containers.RepeatedScalarFieldContainer[float]
    step_line_samples: int
    slot_requests: int
    slot_context_tokens: int
    slot_tightest_tpot_ms: float
    slot_turnover_s: float
    max_batched_tokens: int
    recent_delay_s: float
    class_delays: _containers.RepeatedCompositeFieldContainer[ClassDelay]
    queued_by_class: _containers.RepeatedCompositeFieldContainer[ClassTokens]
    step_allowance_ms: float
    def __init__(self, model: _Optional[str] = ..., replica_id: _Optional[str] = ..., state: _Optional[_Union[ReplicaState, str]] = ..., worker_address: _Optional[str] = ..., running_requests: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., queued_tokens: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., kv_blocks_free: _Optional[int] = ..., waiting_for_memory: _Optional[int] = ..., tokens_per_s: _Optional[float] = ..., max_seqs: _Optional[int] = ..., kv_block_size: _Optional[int] = ..., step_line: _Optional[_Iterable[float]] = ..., step_line_samples: _Optional[int] = ..., slot_requests: _Optional[int] = ..., slot_context_tokens: _Optional[int] = ..., slot_tightest_tpot_ms: _Optional[float] = ..., slot_turnover_s: _Optional[float] = ..., max_batched_tokens: _Optional[int] = ..., recent_delay_s: _Optional[float] = ..., class_delays: _Optional[_Iterable[_Union[ClassDelay, _Mapping]]] = ..., queued_by_class: _Optional[_Iterable[_Union[ClassTokens, _Mapping]]] = ..., step_allowance_ms: _Optional[float] = ...) -> None: ...

class ClassDelay(_message.Message):
    __slots__ = ("priority", "delay_s")
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    priority: int
    delay_s: float
    def __init__(self, priority: _Optional[int] = ..., delay_s: _Optional[float] = ...) -> None: ...

class ClassTokens(_message.Message):
    __slots__ = ("priority", "tokens")
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    priority: int
    tokens: int
    def __init__(self, priority: _Optional[int] = ..., tokens: _Optional[int] = ...) -> None: ...

class TenantLoad(_message.Message):
    __slots__ = ("tenant", "priority", "running", "queued", "tokens", "running_best_effort")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_BEST_EFFORT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    priority: int
    running: int
    queued: int
    tokens: int
    running_best_effort: int
    def __init__(self, tenant: _Optional[str] = ..., priority: _Optional[int] = ..., running: _Optional[int] = ..., queued: _Optional[int] = ..., tokens: _Optional[int] = ..., running_best_effort: _Optional[int] = ...) -> None: ...

class TenantPolicy(_message.Message):
    __slots__ = ("tenant", "sla_class", "priority", "ttft_ms", "tpot_ms", "weight", "guaranteed_share", "burst_share")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SLA_CLASS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    GUARANTEED_SHARE_FIELD_NUMBER: _ClassVar[int]
    BURST_SHARE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    sla_class: str
    priority: int
    ttft_ms: float
    tpot_ms: float
    weight: float
    guaranteed_share: float
    burst_share: float
    def __init__(self, tenant: _Optional[str] = ..., sla_class: _Optional[str] = ..., priority: _Optional[int] = ..., ttft_ms: _Optional[float] = ..., tpot_ms: _Optional[float] = ..., weight: _Optional[float] = ..., guaranteed_share: _Optional[float] = ..., burst_share: _Optional[float] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "address", "memory_bytes", "device", "replicas", "tenants", "interference", "safety_margin", "standby_workers")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    INTERFERENCE_FIELD_NUMBER: _ClassVar[int]
    SAFETY_MARGIN_FIELD_NUMBER: _ClassVar[int]
    STANDBY_WORKERS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    memory_bytes: int
    device: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaInfo]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantLoad]
    interference: float
    safety_margin: float
    standby_workers: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., device: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaInfo, _Mapping]]] = ..., tenants: _Optional[_Iterable[_Union[TenantLoad, _Mapping]]] = ..., interference: _Optional[float] = ..., safety_margin: _Optional[float] = ..., standby_workers: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...
