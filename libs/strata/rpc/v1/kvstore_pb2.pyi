from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KVBlock(_message.Message):
    __slots__ = ("block_hash", "layout", "data", "checksum")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    block_hash: bytes
    layout: str
    data: bytes
    checksum: int
    def __init__(self, block_hash: _Optional[bytes] = ..., layout: _Optional[str] = ..., data: _Optional[bytes] = ..., checksum: _Optional[int] = ...) -> None: ...

class PutBlocksRequest(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[KVBlock]
    def __init__(self, blocks: _Optional[_Iterable[_Union[KVBlock, _Mapping]]] = ...) -> None: ...

class PutBlocksResponse(_message.Message):
    __slots__ = ("stored", "evicted")
    STORED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    evicted: int
    def __init__(self, stored: _Optional[int] = ..., evicted: _Optional[int] = ...) -> None: ...

class GetBlocksRequest(_message.Message):
    __slots__ = ("block_hashes",)
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_hashes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class GetBlocksResponse(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[KVBlock]
    def __init__(self, blocks: _Optional[_Iterable[_Union[KVBlock, _Mapping]]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("block_hashes",)
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_hashes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("prefix_blocks",)
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    prefix_blocks: int
    def __init__(self, prefix_blocks: _Optional[int] = ...) -> None: ...

class KVStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KVStats(_message.Message):
    __slots__ = ("blocks", "bytes_used", "bytes_capacity", "hits", "misses", "evictions", "checksum_failures")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_USED_FIELD_NUMBER: _ClassVar[int]
    BYTES_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FAILURES_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    bytes_used: int
    bytes_capacity: int
    hits: int
    misses: int
    evictions: int
    checksum_failures: int
    def __init__(self, blocks: _Optional[int] = ..., bytes_used: _Optional[int] = ..., bytes_capacity: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., evictions: _Optional[int] = ..., checksum_failures: _Optional[int] = ...) -> None: ...
