"""Compensation for the attention mass the sparse path leaves out.

Full attention of a query head splits over the tokens read (mass 1 - m) and those left out (m):

    out = (1 - m) * got + m * (sum_out p_j v_j / sum_out p_j)

where got is the attention over the selection alone. The sparse path knows neither the left-out
tokens' scores nor m, but it has an estimate of m from the index (select.py's `comp`: each
left-out block's log-normal mass from its keys' center and exact variance; not the trust check's
`moment`, which leans high on purpose) and every block's value sum. Taking the left-out tokens'
weighted mean value as their plain mean, the layer goes on with

    used = (1 - m_est) * got + m_est * v_left,    v_left = mean of v over the tokens left out

rather than dropping their mass (what `got` alone does). m_est is compensation's own estimate,
not the trust check's, which leans high on purpose and would overcompensate (measurements:
docs/design/sparse.md).

v_left comes without reading a left-out block: a row's left-out tokens are its full blocks less
the full blocks it reads, so with S the sum of vsum over the row's full blocks and S_read over
the full blocks it reads (per layer and KV head):

    blocks     | sink | middle ........................... | window ...... w |
    in S       |  x   |  x   x   x   x   x   x   x   x     |  x    x    x    |
    read       |  x   |      x           x                 |  x    x    x  w |
    left out   |      |  x       x   x       x   x   x     |                 |

    (w: the block being written, read but summarized only once it is full, at the next step)

    v_left = (S - S_read) / (16 * left-out blocks)        (for 16-token blocks)

S is kept per request (`RunningSums`): a decode step adds the blocks that became full since the
last one, usually none or one. S_read is summed per layer over the selection's own block list.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.engine.sparse import native as sparse_native
from strata.engine.sparse.index import BlockIndex
from strata.engine.sparse.select import Layout, left_out_mass


@dataclass(slots=True)
class RowSum:
    """A request's sum of vsum over its leading full blocks."""

    block_ids: list[int]  # the physical blocks summed, in position order
    total: torch.Tensor  # [L, KVH, D] float32
    idx: torch.Tensor  # [n] int64: block_ids as a tensor
    generations: torch.Tensor  # [n] int64: each block's BlockIndex.generation when summed


class RunningSums:
    """Per request, the running sum S of its full blocks' value sums.

    An entry stays valid while the request's block table starts with the blocks it summed and
    none of them was summarized again since (BlockIndex.generation): a full block's values never
    change while a request holds it, and a block written again (a resume by recompute rewrites
    its blocks; a resume that got other blocks changes the table) is summarized again once full.
    Either rebuilds the sum. The engine keeps the sum through a request's prefill chunks
    (decode.py), so its first decode step adds a block or two instead of summing thousands."""

    def __init__(self, index: BlockIndex):
        self.index = index
        self.rebuilds = 0  # cumulative sums computed from scratch
        self._rows: dict[str, RowSum] = {}

    def update(self, request_id: str, block_ids: list[int], full: int) -> torch.Tensor:
        """S over block_ids[:full] [L, KVH, D], every one of them summarized in the index;
        RuntimeError if the index keeps no value sums (built without compensation)."""
        vsum = self.index.vsum
        if vsum is None:
            raise RuntimeError("running sums need an index built with compensation (value sums)")
        row = self._rows.get(request_id)
        done = 0 if row is None else len(row.block_ids)
        if (
            row is None
            or done > full
            or block_ids[:done] != row.block_ids
            or (
                done
                and not torch.equal(self.index.generation.index_select(0, row.idx), row.generations)
            )
        ):
            self.rebuilds += 1
            none = torch.zeros(0, dtype=torch.int64, device=vsum.device)
            row = RowSum(
                [], vsum.new_zeros((vsum.shape[0], vsum.shape[1], vsum.shape[3])), none, none
            )
            self._rows[request_id] = row
        new = block_ids[len(row.block_ids) : full]
        if new:
            idx = torch.tensor(new, dtype=torch.int64, device=vsum.device)
            row.total.add_(vsum.index_select(2, idx).sum(dim=2))
            row.block_ids.extend(new)
            row.idx = torch.cat([row.idx, idx])
            row.generations = torch.cat(
                [row.generations, self.index.generation.index_select(0, idx)]
            )
        return row.total

    def drop(self, request_id: str) -> None:
        self._rows.pop(request_id, None)


@dataclass(slots=True)
class LeftOut:
    """One step's sparse rows: what compensation needs besides the layer's selection
    (P = R * KVH pairs, B block list entries per pair as Layout.block_lens has them).

    Laid out once per step so that a layer's v_left is one product: with n a pair's left-out
    tokens, v_left = S / n + sum over the entries read of (-1/n if summed in S) * vsum."""

    totals: torch.Tensor  # [R, L, KVH, D] float32: each row's S
    per_token: torch.Tensor  # [L, P, D] float32: S / n (a layer's slice is contiguous)
    weights: torch.Tensor  # [P, B] float32: -1 / n where the entry is a full block in S
    tokens: torch.Tensor  # [P, 1] float32: n, the pair's tokens left out
    live: torch.Tensor | None  # [P, 1] float32: 0 where n is 0; None: n > 0 for every pair

    @staticmethod
    def build(layout: Layout, totals: torch.Tensor, block_size: int) -> LeftOut:
        """totals [R, L, KVH, D]: each row's S.

        Every pair's list starts with the fixed blocks (sinks, then window, the block being
        written last: select.py) in both selection paths, so that entry is excluded by position:
        a block this step completes is read in full but summarized only at the next step. Every
        other block read is full, so a row reads budget - 1 blocks of S and leaves out
        nblocks - budget (at least one: Layout.build takes rows whose budget leaves one out)."""
        r, _, kv_heads, _ = totals.shape
        dev = totals.device
        fixed = layout.fixed_ids.shape[-1]
        left = [(n - b) * block_size for n, b in zip(layout.nblocks, layout.budgets)]
        inv = [1.0 / n if n > 0 else 0.0 for n in left]
        # per row: the fixed blocks but the last, then the middle blocks it reads (each full),
        # then padding; one list per pair
        weights = [
            [-w] * (fixed - 1) + [0.0] + [-w] * (b - fixed) + [0.0] * (layout.picks - b + fixed)
            for w, b in zip(inv, layout.budgets)
            for _ in range(kv_heads)
        ]
        per_token = (totals * torch.tensor(inv, device=dev)[:, None, None, None]).transpose(0, 1)
        return LeftOut(
            totals=totals,
            per_token=per_token.reshape(per_token.shape[0], r * kv_heads, -1),
            weights=torch.tensor(weights, device=dev),
            tokens=torch.tensor([[float(n)] for n in left for _ in range(kv_heads)], device=dev),
            live=None
            if min(left) > 0
            else torch.tensor([[float(n > 0)] for n in left for _ in range(kv_heads)], device=dev),
        )

    def apply(
        self,
        got: torch.Tensor,
        lse: torch.Tensor,
        log_left_out: torch.Tensor,
        flat: torch.Tensor,
        vsum: torch.Tensor,
        layer: int,
        fused: bool = False,
    ) -> torch.Tensor:
        """got [P, G, D] over the selection with its lse [P, G]; log_left_out [P, G] the log of
        compensation's estimate of the mass left out (Selection.log_left_comp); flat [P, B] the
        selection's flat block ids (attend.flat_ids); vsum the index's [L, KVH, NB, D]. Returns
        (1 - m) * got + m * v_left [P, G, D] in got's dtype; a pair with nothing left out keeps
        got. `fused`: in one pass through sparse_kernels.cpp (compensate)."""
        pairs, _, dim = got.shape
        if fused:
            ops = sparse_native.load()
            assert ops is not None, "fused is set only when the sparse kernels loaded"
            return ops.compensate(
                got,
                lse,
                log_left_out,
                self.per_token[layer],
                self.weights,
                vsum[layer].view(-1, dim),
                flat,
            )
        read = vsum[layer].reshape(-1, dim).index_select(0, flat.reshape(-1))
        v_left = torch.baddbmm(
            self.per_token[layer].view(pairs, 1, dim),
            self.weights.view(pairs, 1, -1),
            read.view(pairs, -1, dim),
        )
        m = left_out_mass(log_left_out, lse)  # [P, G]
        if self.live is not None:
            m = m * self.live
        return torch.lerp(got.float(), v_left, m[..., None]).to(got.dtype)
