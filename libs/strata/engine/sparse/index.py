"""The context index: a small summary of every full KV block, per layer and KV head.

For block b of layer l and KV head h, over its keys k_1..k_n and values v_1..v_n (n =
block_size), per dimension d:

    kmax[l, h, b, d]    max_j k_j[d]                } a box around the keys (Quest): an upper
    kmin[l, h, b, d]    min_j k_j[d]                } bound on every score the block can give
    var[l, h, b, d]     the keys' variance there    exact (population variance of the n keys);
                                                    kept with compensation only
    vsum[l, h, b, d]    sum_j v_j[d], in float32    the values' sum: a request's running sum of
                                                    these gives the mean value of the blocks a
                                                    step leaves out (compensate.py); kept with
                                                    compensation only

The box's midpoint (kmax + kmin) / 2 is the block's rank-1 summary, its center. With the
spread, ((kmax - kmin) / 3)^2 per dimension (the keys' variance read from their range, on the
generous side), it gives the trust check's estimate of the attention mass the block holds, and
with the exact variance the compensation's (select.py). The spread is computed from the box
where it is used (`spread_of`), in float32, not stored: it would cost as much as another row.
The rows are stored side by side, entries[l, h, b] = [kmax | kmin] ([2, D]), or
[kmax | kmin | var] ([3, D]) with compensation, so that one gather per layer reads a row's
blocks; vsum is a tensor of its own, since only the blocks a step reads are summed from it.

The index is per physical block, like the cache: sequences sharing a prefix block share its
entry. An entry is computed from the cache once the block is full and is final from then on,
since a full block's keys never change; a block's entry is rewritten only after the block was
handed out again and filled with new keys. A block becomes full either by the model (its last
slot written in some step) or by a copy from the KV tier store (pool commit); both mark it, and
`refresh` summarizes what was marked at the start of the next step, all layers in one pass.

The summary is a few vectors per block and never refers to where the block's data is: a block
that is not selected at a step only needs its entry and its value sum, so its keys and values may
sit in a lower tier (host memory, disk) while the summary stays valid for scoring, for the trust
check and for the compensation of the mass left out. The memory it takes is, per block, layer
and KV head, 2 D numbers in the cache's dtype, and with compensation (`compensation`) another D
for the var row and D float32 numbers for the value sums, against 2 n D numbers in the cache's
dtype for the block's keys and values: at n = 16, 6.25% of the cache without compensation;
with it, 12.5% of a float32 cache and 15.6% of a bfloat16 one (the float32 sums count twice
there).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

# A block's range in a dimension, taken as this many standard deviations of its keys there: the
# range of 16 normal draws is about 3.5 of them, and a smaller divisor leans towards estimating
# more mass than there is (measurements: docs/design/sparse.md).
RANGE_SIGMAS = 3.0


def spread_of(kmax: torch.Tensor, kmin: torch.Tensor) -> torch.Tensor:
    """The range-based variance ((kmax - kmin) / RANGE_SIGMAS)^2, in float32. The CPU selection
    kernel computes it with the same float operations (spread_row), except its AVX-512 path,
    which folds 1 / RANGE_SIGMAS^2 into the query's row instead (equal within rounding)."""
    return (kmax.float() - kmin.float()).div_(RANGE_SIGMAS).square_()


class BlockIndex:
    def __init__(
        self,
        num_layers: int,
        kv_heads: int,
        num_blocks: int,
        head_dim: int,
        device: torch.device | str,
        dtype: torch.dtype,
        compensation: bool = True,
    ):
        rows = 3 if compensation else 2
        self.entries = torch.zeros(
            (num_layers, kv_heads, num_blocks, rows, head_dim), device=device, dtype=dtype
        )
        # float32 whatever the cache's dtype: a request sums thousands of these (compensate.py);
        # None without compensation, which alone reads them
        self.vsum = (
            torch.zeros(
                (num_layers, kv_heads, num_blocks, head_dim), device=device, dtype=torch.float32
            )
            if compensation
            else None
        )
        # per block, how many times it was summarized: a sum over some blocks' entries stays
        # true while their counts are those it read (compensate.RunningSums)
        self.generation = torch.zeros(num_blocks, dtype=torch.int64, device=device)
        self._marked: set[int] = set()
        self.summarized = 0  # cumulative blocks summarized (every layer at once)

    @property
    def kmax(self) -> torch.Tensor:
        return self.entries[:, :, :, 0]

    @property
    def kmin(self) -> torch.Tensor:
        return self.entries[:, :, :, 1]

    @property
    def spread(self) -> torch.Tensor:
        """Computed from the box (float32), not a view: the index does not store it."""
        return spread_of(self.kmax, self.kmin)

    @property
    def var(self) -> torch.Tensor | None:
        return self.entries[:, :, :, 2] if self.compensation else None

    @property
    def compensation(self) -> bool:
        """Whether the index keeps what compensation needs (the var row, the value sums)."""
        return self.vsum is not None

    def nbytes(self) -> int:
        sums = 0 if self.vsum is None else self.vsum.numel() * self.vsum.element_size()
        return self.entries.numel() * self.entries.element_size() + sums

    def mark(self, block_ids: Iterable[int]) -> None:
        """These blocks just became full (their keys are final): summarize them at `refresh`."""
        self._marked.update(block_ids)

    def mark_one(self, block_id: int, _block_hash: int = 0) -> None:
        """BlockPool's on_commit signature: a block's content became final."""
        self._marked.add(block_id)

    def refresh(self, kv: torch.Tensor) -> int:
        """Summarize the marked blocks from the cache kv[layer, k|v, kv_head, block, slot, dim];
        returns how many there were."""
        if not self._marked:
            return 0
        ids = sorted(self._marked)
        self._marked.clear()
        self.summarize(kv, ids)
        return len(ids)

    def summarize(self, kv: torch.Tensor, block_ids: list[int]) -> None:
        """(Re)compute the entries and value sums of full blocks from the cache."""
        idx = torch.tensor(block_ids, dtype=torch.int64, device=kv.device)
        keys = kv[:, 0].index_select(2, idx)  # [L, KVH, n, BS, D]
        rows = [keys.amax(dim=3), keys.amin(dim=3)]
        if self.vsum is not None:
            # the population variance in two passes (mean, then mean square deviation), which is
            # several times faster than torch's var over a middle dimension; stored in bfloat16
            # the two agree to within one unit in the last place (docs/design/sparse.md)
            k32 = keys.float()
            rows.append((k32 - k32.mean(dim=3, keepdim=True)).square_().mean(dim=3).to(keys.dtype))
        self.entries.index_copy_(2, idx, torch.stack(rows, dim=3))
        if self.vsum is not None:
            self.vsum.index_copy_(
                2, idx, kv[:, 1].index_select(2, idx).sum(dim=3, dtype=torch.float32)
            )
        self.generation.index_add_(0, idx, torch.ones_like(idx))
        self.summarized += len(block_ids)
