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
    __slots__ = ("prefix_blocks", "host_blocks", "disk_blocks")
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HOST_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DISK_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    prefix_blocks: int
    host_blocks: int
    disk_blocks: int
    def __init__(self, prefix_blocks: _Optional[int] = ..., host_blocks: _Optional[int] = ..., disk_blocks: _Optional[int] = ...) -> None: ...

class KVStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TierStats(_message.Message):
    __slots__ = ("tier", "blocks", "bytes_used", "bytes_capacity", "hits", "evictions", "migrations_in")
    TIER_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_USED_FIELD_NUMBER: _ClassVar[int]
    BYTES_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    MIGRATIONS_IN_FIELD_NUMBER: _ClassVar[int]
    tier: str
    blocks: int
    bytes_used: int
    bytes_capacity: int
    hits: int
    evictions: int
    migrations_in: int
    def __init__(self, tier: _Optional[str] = ..., blocks: _Optional[int] = ..., bytes_used: _Optional[int] = ..., bytes_capacity: _Optional[int] = ..., hits: _Optional[int] = ..., evictions: _Optional[int] = ..., migrations_in: _Optional[int] = ...) -> None: ...

class KVStats(_message.Message):
    __slots__ = ("blocks", "bytes_used", "bytes_capacity", "hits", "misses", "evictions", "checksum_failures", "tiers", "device_blocks", "pinned_blocks", "reserved_bytes", "pressure", "recovered_blocks", "dropped_corrupt", "peer_blocks_pulled", "reserve_refused", "node_blocks")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_USED_FIELD_NUMBER: _ClassVar[int]
    BYTES_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FAILURES_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PINNED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_CORRUPT_FIELD_NUMBER: _ClassVar[int]
    PEER_BLOCKS_PULLED_FIELD_NUMBER: _ClassVar[int]
    RESERVE_REFUSED_FIELD_NUMBER: _ClassVar[int]
    NODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    bytes_used: int
    bytes_capacity: int
    hits: int
    misses: int
    evictions: int
    checksum_failures: int
    tiers: _containers.RepeatedCompositeFieldContainer[TierStats]
    device_blocks: int
    pinned_blocks: int
    reserved_bytes: int
    pressure: bool
    recovered_blocks: int
    dropped_corrupt: int
    peer_blocks_pulled: int
    reserve_refused: int
    node_blocks: int
    def __init__(self, blocks: _Optional[int] = ..., bytes_used: _Optional[int] = ..., bytes_capacity: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., evictions: _Optional[int] = ..., checksum_failures: _Optional[int] = ..., tiers: _Optional[_Iterable[_Union[TierStats, _Mapping]]] = ..., device_blocks: _Optional[int] = ..., pinned_blocks: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., pressure: _Optional[bool] = ..., recovered_blocks: _Optional[int] = ..., dropped_corrupt: _Optional[int] = ..., peer_blocks_pulled: _Optional[int] = ..., reserve_refused: _Optional[int] = ..., node_blocks: _Optional[int] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AttachResponse(_message.Message):
    __slots__ = ("shm_path", "shm_bytes")
    SHM_PATH_FIELD_NUMBER: _ClassVar[int]
    SHM_BYTES_FIELD_NUMBER: _ClassVar[int]
    shm_path: str
    shm_bytes: int
    def __init__(self, shm_path: _Optional[str] = ..., shm_bytes: _Optional[int] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("block_bytes", "count")
    BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    block_bytes: int
    count: int
    def __init__(self, block_bytes: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("offsets", "tickets")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TICKETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    tickets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offsets: _Optional[_Iterable[int]] = ..., tickets: _Optional[_Iterable[int]] = ...) -> None: ...

class CommittedBlock(_message.Message):
    __slots__ = ("offset", "block_hash", "layout", "checksum", "ticket")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    block_hash: int
    layout: str
    checksum: int
    ticket: int
    def __init__(self, offset: _Optional[int] = ..., block_hash: _Optional[int] = ..., layout: _Optional[str] = ..., checksum: _Optional[int] = ..., ticket: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("blocks", "unused_offsets", "unused_tickets")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    UNUSED_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    UNUSED_TICKETS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[CommittedBlock]
    unused_offsets: _containers.RepeatedScalarFieldContainer[int]
    unused_tickets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, blocks: _Optional[_Iterable[_Union[CommittedBlock, _Mapping]]] = ..., unused_offsets: _Optional[_Iterable[int]] = ..., unused_tickets: _Optional[_Iterable[int]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("stored", "duplicates", "rejected")
    STORED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    duplicates: int
    rejected: int
    def __init__(self, stored: _Optional[int] = ..., duplicates: _Optional[int] = ..., rejected: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("block_hashes", "promote")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    promote: bool
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., promote: _Optional[bool] = ...) -> None: ...

class PinnedBlock(_message.Message):
    __slots__ = ("block_hash", "offset", "nbytes", "layout", "checksum")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    block_hash: int
    offset: int
    nbytes: int
    layout: str
    checksum: int
    def __init__(self, block_hash: _Optional[int] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ..., layout: _Optional[str] = ..., checksum: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("blocks", "lease_id", "disk_blocks")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DISK_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[PinnedBlock]
    lease_id: int
    disk_blocks: int
    def __init__(self, blocks: _Optional[_Iterable[_Union[PinnedBlock, _Mapping]]] = ..., lease_id: _Optional[int] = ..., disk_blocks: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease_ids", "moved")
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    lease_ids: _containers.RepeatedScalarFieldContainer[int]
    moved: bool
    def __init__(self, lease_ids: _Optional[_Iterable[int]] = ..., moved: _Optional[bool] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PrefetchRequest(_message.Message):
    __slots__ = ("block_hashes", "peer_address")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    peer_address: str
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., peer_address: _Optional[str] = ...) -> None: ...

class PrefetchResponse(_message.Message):
    __slots__ = ("host_blocks", "queued_promotions")
    HOST_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_PROMOTIONS_FIELD_NUMBER: _ClassVar[int]
    host_blocks: int
    queued_promotions: int
    def __init__(self, host_blocks: _Optional[int] = ..., queued_promotions: _Optional[int] = ...) -> None: ...

class DeviceBlocksRequest(_message.Message):
    __slots__ = ("worker_id", "stored", "removed", "reset")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    stored: _containers.RepeatedScalarFieldContainer[int]
    removed: _containers.RepeatedScalarFieldContainer[int]
    reset: bool
    def __init__(self, worker_id: _Optional[str] = ..., stored: _Optional[_Iterable[int]] = ..., removed: _Optional[_Iterable[int]] = ..., reset: _Optional[bool] = ...) -> None: ...

class DeviceBlocksResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("peer_address", "block_hashes")
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    peer_address: str
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, peer_address: _Optional[str] = ..., block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("pulled",)
    PULLED_FIELD_NUMBER: _ClassVar[int]
    pulled: int
    def __init__(self, pulled: _Optional[int] = ...) -> None: ...
