from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlacementAssignment(_message.Message):
    __slots__ = ("model", "node_id", "replica_id", "reason")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    model: str
    node_id: str
    replica_id: str
    reason: str
    def __init__(self, model: _Optional[str] = ..., node_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PlacementPlan(_message.Message):
    __slots__ = ("version", "assignments", "unplaced_models", "created_unix_ms")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    UNPLACED_MODELS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    version: int
    assignments: _containers.RepeatedCompositeFieldContainer[PlacementAssignment]
    unplaced_models: _containers.RepeatedScalarFieldContainer[str]
    created_unix_ms: int
    def __init__(self, version: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[PlacementAssignment, _Mapping]]] = ..., unplaced_models: _Optional[_Iterable[str]] = ..., created_unix_ms: _Optional[int] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplanRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
