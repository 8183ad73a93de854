from strata.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseRequest(_message.Message):
    __slots__ = ("name", "holder", "ttl_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    ttl_s: float
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("granted", "holder", "remaining_s")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    holder: str
    remaining_s: float
    def __init__(self, granted: _Optional[bool] = ..., holder: _Optional[str] = ..., remaining_s: _Optional[float] = ...) -> None: ...

class KVEventsRequest(_message.Message):
    __slots__ = ("node_id", "store_address", "sequence", "reset", "stored", "removed")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    store_address: str
    sequence: int
    reset: bool
    stored: _containers.RepeatedScalarFieldContainer[int]
    removed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node_id: _Optional[str] = ..., store_address: _Optional[str] = ..., sequence: _Optional[int] = ..., reset: _Optional[bool] = ..., stored: _Optional[_Iterable[int]] = ..., removed: _Optional[_Iterable[int]] = ...) -> None: ...

class KVEventsResponse(_message.Message):
    __slots__ = ("need_reset",)
    NEED_RESET_FIELD_NUMBER: _ClassVar[int]
    need_reset: bool
    def __init__(self, need_reset: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node", "models", "arrived_routes")
    NODE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    ARRIVED_ROUTES_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.NodeInfo
    models: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelInfo]
    arrived_routes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[_Union[_common_pb2.NodeInfo, _Mapping]] = ..., models: _Optional[_Iterable[_Union[_common_pb2.ModelInfo, _Mapping]]] = ..., arrived_routes: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("heartbeat_interval_ms",)
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_ms: int
    def __init__(self, heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ("model", "tenant", "prompt_tokens_estimate", "prefix_hashes", "policy", "max_tokens", "rate_limit_rps", "rate_limit_burst")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HASHES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_RPS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_BURST_FIELD_NUMBER: _ClassVar[int]
    model: str
    tenant: str
    prompt_tokens_estimate: int
    prefix_hashes: _containers.RepeatedScalarFieldContainer[int]
    policy: _common_pb2.TenantPolicy
    max_tokens: int
    rate_limit_rps: float
    rate_limit_burst: float
    def __init__(self, model: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt_tokens_estimate: _Optional[int] = ..., prefix_hashes: _Optional[_Iterable[int]] = ..., policy: _Optional[_Union[_common_pb2.TenantPolicy, _Mapping]] = ..., max_tokens: _Optional[int] = ..., rate_limit_rps: _Optional[float] = ..., rate_limit_burst: _Optional[float] = ...) -> None: ...

class RouteResponse(_message.Message):
    __slots__ = ("node_id", "node_address", "replica_id", "cached_blocks", "kv_source_address", "kv_source_blocks", "estimated_ttft_ms", "route_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    KV_SOURCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KV_SOURCE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    node_address: str
    replica_id: str
    cached_blocks: int
    kv_source_address: str
    kv_source_blocks: int
    estimated_ttft_ms: float
    route_id: str
    def __init__(self, node_id: _Optional[str] = ..., node_address: _Optional[str] = ..., replica_id: _Optional[str] = ..., cached_blocks: _Optional[int] = ..., kv_source_address: _Optional[str] = ..., kv_source_blocks: _Optional[int] = ..., estimated_ttft_ms: _Optional[float] = ..., route_id: _Optional[str] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[_common_pb2.NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[_common_pb2.NodeInfo, _Mapping]]] = ...) -> None: ...
