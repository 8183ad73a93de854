from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MuxBatch(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[MuxFrame]
    def __init__(self, frames: _Optional[_Iterable[_Union[MuxFrame, _Mapping]]] = ...) -> None: ...

class MuxFrame(_message.Message):
    __slots__ = ("call_id", "open", "message", "close", "cancel")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    open: MuxOpen
    message: bytes
    close: MuxClose
    cancel: bool
    def __init__(self, call_id: _Optional[int] = ..., open: _Optional[_Union[MuxOpen, _Mapping]] = ..., message: _Optional[bytes] = ..., close: _Optional[_Union[MuxClose, _Mapping]] = ..., cancel: _Optional[bool] = ...) -> None: ...

class MuxOpen(_message.Message):
    __slots__ = ("method", "request", "metadata", "timeout_s")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    method: str
    request: bytes
    metadata: _containers.RepeatedCompositeFieldContainer[MuxMetadatum]
    timeout_s: float
    def __init__(self, method: _Optional[str] = ..., request: _Optional[bytes] = ..., metadata: _Optional[_Iterable[_Union[MuxMetadatum, _Mapping]]] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class MuxMetadatum(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class MuxClose(_message.Message):
    __slots__ = ("code", "details", "trailing_metadata")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    TRAILING_METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    trailing_metadata: _containers.RepeatedCompositeFieldContainer[MuxMetadatum]
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ..., trailing_metadata: _Optional[_Iterable[_Union[MuxMetadatum, _Mapping]]] = ...) -> None: ...
