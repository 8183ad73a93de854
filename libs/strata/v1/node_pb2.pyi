from strata.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitRequest(_message.Message):
    __slots__ = ("request_id", "tenant", "priority", "spec", "replica_id", "kv_source_address", "policy", "prompt_tokens_estimate", "route_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    KV_SOURCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    priority: int
    spec: _common_pb2.GenerationSpec
    replica_id: str
    kv_source_address: str
    policy: _common_pb2.TenantPolicy
    prompt_tokens_estimate: int
    route_id: str
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., priority: _Optional[int] = ..., spec: _Optional[_Union[_common_pb2.GenerationSpec, _Mapping]] = ..., replica_id: _Optional[str] = ..., kv_source_address: _Optional[str] = ..., policy: _Optional[_Union[_common_pb2.TenantPolicy, _Mapping]] = ..., prompt_tokens_estimate: _Optional[int] = ..., route_id: _Optional[str] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("model", "replica_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    replica_id: str
    def __init__(self, model: _Optional[str] = ..., replica_id: _Optional[str] = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ("replica",)
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    replica: _common_pb2.ReplicaInfo
    def __init__(self, replica: _Optional[_Union[_common_pb2.ReplicaInfo, _Mapping]] = ...) -> None: ...

class UnloadModelRequest(_message.Message):
    __slots__ = ("model", "replica_id", "drain_timeout_ms")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    model: str
    replica_id: str
    drain_timeout_ms: int
    def __init__(self, model: _Optional[str] = ..., replica_id: _Optional[str] = ..., drain_timeout_ms: _Optional[int] = ...) -> None: ...

class UnloadModelResponse(_message.Message):
    __slots__ = ("unloaded",)
    UNLOADED_FIELD_NUMBER: _ClassVar[int]
    unloaded: int
    def __init__(self, unloaded: _Optional[int] = ...) -> None: ...

class GetNodeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
