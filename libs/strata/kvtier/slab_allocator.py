"""Offsets in the host tier's shared-memory segment: a slab allocator for fixed-size blocks.

    segment  [ slab 0 | slab 1 | slab 2 | ... ]      every slab is `slab_bytes` long
    slab     [ slot | slot | slot | ... | tail ]     all slots of a slab have one size

A KV block's size is fixed by its layout (layers x k|v x heads x tokens x dim x dtype), so a node
sees one or two sizes, one per model. A slab takes the size of the first block put into it and
goes back to the free slabs when its last slot is freed, so a size that stops being used gives its
memory to the others. Allocation and free are O(1) amortized. Pure bookkeeping: no I/O, no locks
(the store holds its lock around every call).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Slab:
    slot_bytes: int
    free_slots: list[int] = field(default_factory=list)  # offsets
    used: int = 0


class SlabAllocator:
    def __init__(self, capacity_bytes: int, slab_bytes: int):
        if slab_bytes <= 0 or capacity_bytes < slab_bytes:
            raise ValueError(
                f"the host tier needs at least one slab: capacity {capacity_bytes} "
                f"bytes, slab {slab_bytes} bytes"
            )
        self.slab_bytes = slab_bytes
        self.num_slabs = capacity_bytes // slab_bytes
        self.capacity_bytes = self.num_slabs * slab_bytes
        self._free_slabs = list(range(self.num_slabs - 1, -1, -1))
        self._slabs: dict[int, _Slab] = {}  # slab index -> slab in use
        self._partial: dict[int, set[int]] = {}  # slot size -> slabs with a free slot
        self.bytes_used = 0  # bytes of allocated slots

    def fits(self, nbytes: int) -> bool:
        return 0 < nbytes <= self.slab_bytes

    def alloc(self, nbytes: int) -> int | None:
        """Offset of a free slot of exactly nbytes, or None when the segment has none."""
        if not self.fits(nbytes):
            raise ValueError(
                f"a {nbytes}-byte block does not fit a {self.slab_bytes}-byte slab; "
                f"raise the slab size"
            )
        partial = self._partial.get(nbytes)
        if partial:
            index = next(iter(partial))
        elif self._free_slabs:
            index = self._free_slabs.pop()
            base = index * self.slab_bytes
            count = self.slab_bytes // nbytes
            slab = _Slab(nbytes, [base + i * nbytes for i in range(count - 1, -1, -1)])
            self._slabs[index] = slab
            self._partial.setdefault(nbytes, set()).add(index)
        else:
            return None
        slab = self._slabs[index]
        offset = slab.free_slots.pop()
        slab.used += 1
        if not slab.free_slots:
            self._partial[nbytes].discard(index)
        self.bytes_used += nbytes
        return offset

    def free(self, offset: int) -> None:
        index = offset // self.slab_bytes
        slab = self._slabs.get(index)
        if slab is None or (offset - index * self.slab_bytes) % slab.slot_bytes:
            raise ValueError(f"offset {offset} is not an allocated slot")
        slab.free_slots.append(offset)
        slab.used -= 1
        self.bytes_used -= slab.slot_bytes
        if slab.used == 0:
            del self._slabs[index]
            self._partial[slab.slot_bytes].discard(index)
            self._free_slabs.append(index)
        else:
            self._partial[slab.slot_bytes].add(index)

    def slot_bytes(self, offset: int) -> int | None:
        slab = self._slabs.get(offset // self.slab_bytes)
        return None if slab is None else slab.slot_bytes

    def free_bytes_for(self, nbytes: int) -> int:
        """Bytes still allocatable as nbytes-sized slots (partial slabs plus empty slabs)."""
        partial = sum(len(self._slabs[i].free_slots) for i in self._partial.get(nbytes, ()))
        return partial * nbytes + len(self._free_slabs) * (self.slab_bytes // nbytes) * nbytes
