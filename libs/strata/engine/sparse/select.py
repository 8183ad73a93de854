"""Scoring and selection of a decode row's KV blocks; the estimate of the attention mass left out.

For a query q (scores scaled by `scale`) and a full block b of n keys, from its index entry:

    bound   q.k <= sum_d max(q_d kmin_d, q_d kmax_d) = relu(q).kmax + min(q, 0).kmin   (Quest)
            for every key k of the block, so  sum_j exp(q.k_j) <= n exp(bound)
    moment  sum_j exp(q.k_j) ~ n exp(q.center + sum_d q_d^2 spread_d / 2), the mean of a
            log-normal: center = (kmax + kmin) / 2, spread_d = ((kmax_d - kmin_d) / 3)^2;
            capped by n exp(bound), which always holds

    comp    the same log-normal mean with the keys' exact variance var_d in place of spread_d
            (an index with compensation keeps it as a third row), also capped by the bound

All come out of one matrix product of [relu(q), min(q, 0), 0, 0 ; q/2, q/2, q^2/2, 0 ;
q/2, q/2, 0, q^2/2] with [kmax | kmin | spread | var] (without compensation, the first two
rows and three columns): the index stores [kmax | kmin (| var)], and the spread is computed
from the box in float32 (`full_entries`; the CPU kernel computes it per block as it reads).

A row's blocks, in position order, split into sinks | middle | window (the window ends with the
block being written, which has no index entry yet). Sinks and window are always read; middle
blocks are ranked per KV head by their bound, each query head's bounds taken relative to that
head's best block (the KV head serves G query heads, and a head whose scores are all large
must not outrank the others), and the best are read up to the row's budget.

The mass a query head gives the blocks left out is m = S_out / (Z_in + S_out), with Z_in the sum
of exp(score) over the keys read (exact, from the attention over them) and S_out over the rest.
Replacing S_out with E, the sum of the left-out blocks' estimates, gives m_est = E / (Z_in + E);
x / (Z + x) grows with x, so with the `bound` estimate m_est >= m always holds. On real keys the
bound is far above the scores (a box in head_dim dimensions), so a trust check on it sends
nearly every step to full attention; the `moment` estimate stays near m, on the generous side,
though it can fall below it.

Compensation (compensate.py) needs m itself rather than a number on the safe side, so it takes
`comp`; `moment` leans high on purpose and would overcompensate. The trust check stays on
`moment`, since `comp` is below m for some heads that need full attention (measurements:
docs/design/sparse.md).

A pair (row, KV head), p = row * kv_heads + kv_head, reads its blocks in the order sinks,
window, chosen middle blocks (attention does not depend on the order; the partly filled block's
length is carried per block). What depends only on the rows is laid out once per step
(`Layout`), what depends on the queries once per layer (`select_blocks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from strata.engine.sparse import native as sparse_native
from strata.engine.sparse.attend import flat_ids
from strata.engine.sparse.config import SparseConfig
from strata.engine.sparse.index import RANGE_SIGMAS, BlockIndex, spread_of

_NEG = float("-inf")


def score_blocks(
    q: torch.Tensor, entries: torch.Tensor, scale: float, block_size: int, estimate: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Bounds on every score and estimates of the log mass of each block.

    q [..., G, D]; entries [..., M, 2 * D] ([kmax | kmin] per block, as the index stores them)
    or [..., M, 3 * D] (with var). Returns (bounds on scale * q.k, log of the trust check's
    estimate of sum_j exp(scale * q.k_j), log of compensation's estimate or None without the var
    row), each [..., G, M] in float32.
    """
    comp = entries.shape[-1] == 3 * q.shape[-1]
    full = full_entries(entries, q.shape[-1])
    product = torch.matmul(query_rows(q, scale, estimate, comp), full.transpose(-1, -2))
    return split_scores(product, q.shape[-2], block_size, estimate, comp)


def full_entries(entries: torch.Tensor, dim: int) -> torch.Tensor:
    """Stored entries [..., 2D or 3D] -> [kmax | kmin | spread (| var)] [..., 3D or 4D] in
    float32, the columns query_rows' rows multiply."""
    kmax, kmin = entries[..., :dim], entries[..., dim : 2 * dim]
    return torch.cat(
        [kmax.float(), kmin.float(), spread_of(kmax, kmin), entries[..., 2 * dim :].float()], dim=-1
    )


def query_rows(q: torch.Tensor, scale: float, estimate: str, comp: bool = False) -> torch.Tensor:
    """[..., G, D] -> the rows whose products with the entries give the bounds (first G), for
    the moment estimate the log-normal exponents (next G) and with `comp` compensation's
    exponents (last G): [..., G to 3G, 3D], or 4D with `comp`."""
    q32 = q.float() * scale
    zero = torch.zeros_like(q32)
    pad = [zero] if comp else []
    rows = [torch.cat([q32.clamp(min=0), q32.clamp(max=0), zero, *pad], dim=-1)]
    half = q32 * 0.5
    if estimate == "moment":
        rows.append(torch.cat([half, half, q32 * half, *pad], dim=-1))
    if comp:
        rows.append(torch.cat([half, half, zero, q32 * half], dim=-1))
    return torch.cat(rows, dim=-2)


def split_scores(
    product: torch.Tensor, g: int, block_size: int, estimate: str, comp: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The product of query_rows and the entries -> (bounds, trust log mass, comp log mass)."""
    bounds = product[..., :g, :]
    log_n = math.log(block_size)
    if estimate == "bound":
        mass = bounds + log_n
    else:
        mass = torch.minimum(product[..., g : 2 * g, :], bounds).add_(log_n)
    if not comp:
        return bounds, mass, None
    return bounds, mass, torch.minimum(product[..., -g:, :], bounds).add_(log_n)


@dataclass(slots=True)
class Layout:
    """One step's sparse rows: their blocks split into sinks | middle | window (R rows)."""

    block_tables: torch.Tensor  # [R, W] physical block ids, padded with 0
    context_lens: torch.Tensor  # [R]
    nblocks: list[int]  # blocks of each row's context
    budgets: list[int]  # blocks each row reads per KV head
    mid_ids: torch.Tensor  # [R*M] middle blocks' physical ids (0 past a row's middle)
    score_all: bool  # score every block of the pool, then pick the rows' ones
    mid_mask: torch.Tensor | None  # [1, R, 1, M] float32: 0, or -inf past a row's middle;
    #                                None when every row's middle is M blocks long
    mid_valid: torch.Tensor  # [1, R, M] bool
    picks: int  # K: the most middle blocks a row reads
    mid_counts: torch.Tensor  # [R] int64: each row's middle blocks
    takes: torch.Tensor  # [R] int64: the middle blocks each row reads
    chosen: torch.Tensor  # [1, R, K] bool: the row reads its j-th best middle block
    fixed_ids: torch.Tensor  # [R, 1, S+W] sinks then window (the block being written last)
    block_lens: torch.Tensor  # [R, 1, S+W+K] tokens read from each block (0: not read)
    pair_block_lens: torch.Tensor | None = None  # [R*KVH, S+W+K]: block_lens per pair, laid
    #                                               out by the first layer's selection

    def pair_lens(self, kv_heads: int) -> torch.Tensor:
        """block_lens per pair (pair = row * KVH + head), [R*KVH, S+W+K]; the same every layer."""
        lens = self.pair_block_lens
        if lens is None or lens.shape[0] != self.block_lens.shape[0] * kv_heads:
            r = self.block_lens.shape[0]
            lens = self.block_lens.expand(r, kv_heads, -1).reshape(r * kv_heads, -1)
            self.pair_block_lens = lens
        return lens

    @staticmethod
    def build(
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        cfg: SparseConfig,
        block_size: int,
        pool_blocks: int = 0,
    ) -> Layout:
        """Every row must satisfy cfg.applies (its budget leaves a middle block out).

        With `pool_blocks` (the pool's size), the rows score every block of the pool in place
        when that reads at most twice the entries a gather of their own would copy: a gather
        costs a read, a write and a read again."""
        dev = block_tables.device
        sinks, window = cfg.sink_blocks, cfg.window_blocks
        lens = context_lens.tolist()
        nblocks = [-(-n // block_size) for n in lens]
        budgets = [cfg.budget_for(n) for n in nblocks]
        counts = [n - sinks - window for n in nblocks]  # middle blocks of each row
        takes = [b - sinks - window for b in budgets]  # the ones it reads
        width, picks = max(counts), max(takes)
        # A handful of tensors built from these per-row numbers (a step has a few rows), not a
        # chain of small tensor operations: this runs every step.
        mid_ids = block_tables[:, sinks : sinks + width]  # a row's middle, then padding
        full_width = min(counts) == width
        valid = (
            torch.arange(width, device=dev)[None, :] < torch.tensor(counts, device=dev)[:, None]
        )  # [R, M]
        fixed_pos = [[*range(sinks), *range(n - window, n)] for n in nblocks]
        fixed_lens = [
            [block_size] * (sinks + window - 1) + [n - (b - 1) * block_size]
            for n, b in zip(lens, nblocks)
        ]
        takes_t = torch.tensor(takes, device=dev)
        chosen = torch.arange(picks, device=dev)[None, :] < takes_t[:, None]  # [R, K]
        return Layout(
            block_tables=block_tables,
            context_lens=context_lens,
            nblocks=nblocks,
            budgets=budgets,
            mid_ids=(mid_ids if full_width else mid_ids.masked_fill(~valid, 0)).reshape(-1),
            score_all=0 < pool_blocks <= 2 * width,
            mid_mask=None
            if full_width
            else torch.zeros(valid.shape, device=dev).masked_fill_(~valid, _NEG)[None, :, None],
            mid_valid=valid[None],
            picks=picks,
            mid_counts=torch.tensor(counts, device=dev),
            takes=takes_t,
            chosen=chosen[None],
            fixed_ids=block_tables.gather(1, torch.tensor(fixed_pos, device=dev))[:, None],
            block_lens=torch.cat(
                [torch.tensor(fixed_lens, device=dev), chosen.long() * block_size], 1
            )[:, None],
        )


@dataclass(slots=True)
class Selection:
    """What each pair reads, and the estimate of what it leaves out (P = R * KVH pairs)."""

    block_ids: torch.Tensor  # [P, B] physical blocks: sinks, window, then chosen middle
    flat_ids: torch.Tensor  # [P, B] the same as ids into the cache seen as KVH * NB blocks
    block_lens: torch.Tensor  # [P, B] tokens read from each (0: a padding entry)
    log_left_out: torch.Tensor  # [P, G] log of the estimate of sum exp(score) left out
    log_left_comp: torch.Tensor | None  # [P, G] the same by compensation's estimate (None:
    #                                      the index has no var row)


def select_blocks(
    q: torch.Tensor,
    index: BlockIndex,
    layer: int,
    layout: Layout,
    cfg: SparseConfig,
    block_size: int,
    scale: float,
    fused: bool = False,
) -> Selection:
    """q [R, KVH, G, D]: the rows' queries grouped by KV head. Flat ids count the index's
    blocks, which are the cache's (attend.flat_ids). `fused`: scoring and selection
    through sparse_kernels.cpp (select_blocks), which reads the entries in place; it breaks
    ties at the cut by position, where torch's topk may not, and lists a pair's chosen blocks in
    position order, torch in rank order (attention does not depend on the order)."""
    r, kv_heads, g, dim = q.shape
    width = layout.mid_valid.shape[-1]
    layer_entries = index.entries[layer]  # [KVH, NB, 2|3, D]
    e = layer_entries.shape[2] * dim
    comp = index.compensation
    if fused:
        # the same selection in one pass over each pair's middle blocks, entries read in place
        ops = sparse_native.load()
        assert ops is not None, "fused is set only when the sparse kernels loaded"
        ids, flat, log_left_out, log_comp = ops.select_blocks(
            q.reshape(r * kv_heads, g, dim),
            layer_entries.view(kv_heads, -1, e),
            layout.mid_ids.view(r, width),
            layout.mid_counts,
            layout.takes,
            layout.fixed_ids.view(r, -1),
            layout.picks,
            scale,
            cfg.estimate == "moment",
            math.log(block_size),
            comp,
            RANGE_SIGMAS,
        )
        return Selection(
            block_ids=ids,
            flat_ids=flat,
            block_lens=layout.pair_lens(kv_heads),
            log_left_out=log_left_out,
            log_left_comp=log_comp if comp else None,
        )
    rows = query_rows(q.transpose(0, 1), scale, cfg.estimate, comp)  # [KVH, R, G', E']
    wide = rows.shape[-1]  # E + D: the spread
    if layout.score_all:
        everything = full_entries(layer_entries.view(kv_heads, -1, e), dim).transpose(-1, -2)
        product = torch.matmul(rows.reshape(kv_heads, -1, wide), everything)  # [KVH, R*G', NB]
        product = product.view(kv_heads, r, rows.shape[2], -1).gather(
            -1, layout.mid_ids.view(1, r, 1, width).expand(kv_heads, r, rows.shape[2], width)
        )
    else:
        entries = layer_entries.index_select(1, layout.mid_ids)  # [KVH, R*M, 2|3, D]
        product = torch.matmul(
            rows, full_entries(entries.view(kv_heads, r, width, e), dim).transpose(-1, -2)
        )  # [KVH, R, G', M]
    bounds, mass, comp_mass = split_scores(product, g, block_size, cfg.estimate, comp)
    if layout.mid_mask is not None:
        bounds = bounds + layout.mid_mask
    rank = (bounds - bounds.amax(dim=-1, keepdim=True)).amax(dim=2)  # [KVH, R, M]
    top = rank.topk(layout.picks, dim=-1).indices  # [KVH, R, K]
    taken = torch.zeros(rank.shape, dtype=torch.bool, device=q.device)
    taken.scatter_(-1, top, layout.chosen.expand_as(top))
    left = layout.mid_valid & ~taken  # [KVH, R, M]
    out = ~left[:, :, None, :]

    def log_left(log_mass: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(log_mass.masked_fill_(out, _NEG), dim=-1)  # [KVH, R, G]
        return lse.transpose(0, 1).reshape(r * kv_heads, g)

    picked = layout.mid_ids.view(1, r, width).expand(kv_heads, r, width).gather(2, top)
    ids = torch.cat([layout.fixed_ids.expand(r, kv_heads, -1), picked.transpose(0, 1)], dim=-1)
    ids = ids.reshape(r * kv_heads, -1)
    return Selection(
        block_ids=ids,
        flat_ids=flat_ids(ids, kv_heads, index.entries.shape[2]),
        block_lens=layout.pair_lens(kv_heads),
        log_left_out=log_left(mass),
        log_left_comp=None if comp_mass is None else log_left(comp_mass),
    )


def left_out_mass(log_left_out: torch.Tensor, lse_in: torch.Tensor) -> torch.Tensor:
    """The estimate of the attention mass left out, E / (Z_in + E), from log E and log Z_in."""
    return torch.sigmoid(log_left_out - lse_in)
