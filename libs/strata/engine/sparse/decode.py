"""The sparse decode path in the engine: which rows of a step take it, and one layer's run of it.

Per step (`SparseDecoder.plan`, before the model runs): the index summarizes the blocks that
became full since it last did (at steps with a request on the path only), and every decode row
whose request has the path on and whose context passes SparseConfig.applies becomes a sparse
row. Per layer (`SparseStep.attend`, called by paged_attention for the decode group):

    dense rows            -> the usual decode attention (the same kernel, the same numbers)
    sparse rows  -> select blocks per KV head (select.py) -> exact attention over them, with Z_in
                 -> compensation (compensate.py, cfg.compensate): the left-out mass m, by
                    compensation's estimate, goes to the left-out tokens' mean value,
                    (1 - m) got + m v_left
                 -> trust check per (row, KV head): estimated left-out mass > threshold
                    -> that KV head group recomputed over all its blocks (full attention)

The plan also brings each sparse row's running sum of its full blocks' values up to date
(compensate.RunningSums, per request: the new full blocks added, or all of them again when the
block table no longer starts with the blocks summed or one of them was summarized again), at
every prefill chunk of a request on the path as well as when its layout is built (below), so a
first decode step adds a block or two to the sum rather than summing the whole context.

A step's layout of its sparse rows (Layout, LeftOut) is kept for the next steps while the same
rows decode in the same blocks (_Prepared): between two block boundaries only the context lengths
change. Without a probe, a layer's sparse rows go through one kernel call (sparse_kernels.cpp's
sparse_decode: selection, attention, compensation and the trust check per pair, then the
fallbacks, and the KV head groups the layer policy runs dense outright, as full attention split
over the threads).

Counters: a "layer step" is one sparse row through one layer; a fallback is a layer step in which
at least one KV head group was recomputed; a partly dense one ran a group dense outright and
recomputed none; blocks are counted per KV head (a layer step of a row with n blocks and H KV
heads would read n * H dense).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from strata.engine.attention import Group, SeqSlice
from strata.engine.sparse import native as sparse_native
from strata.engine.sparse.attend import attend_blocks, attend_full
from strata.engine.sparse.compensate import LeftOut, RunningSums
from strata.engine.sparse.config import SparseConfig
from strata.engine.sparse.index import RANGE_SIGMAS, BlockIndex
from strata.engine.sparse.layers import LayerBudgets
from strata.engine.sparse.select import Layout, left_out_mass, select_blocks

DenseDecode = Callable[[Group], torch.Tensor]  # a decode group -> its output [S, H, D]
CommitHook = Callable[[int, int], None]


@dataclass(slots=True)
class SparseStats:
    """Cumulative counters (WorkerStats.sparse_*)."""

    decode_rows: int = 0
    layer_steps: int = 0  # through the sparse selection
    fallbacks: int = 0
    dense_layer_steps: int = 0  # of sparse rows, in layers the adaptive policy ran dense
    partly_dense: int = 0  # layer steps with a KV head group run dense outright, none recomputed
    group_steps: int = 0  # (layer step, KV head group) units of sparse rows, dense layers too
    groups_kept: int = 0  # of those, read their budget and passed the trust check
    blocks_read: int = 0
    blocks_dense: int = 0


@dataclass(slots=True)
class RequestSparse:
    """One request's share of the counters (its span's attributes)."""

    layer_steps: int = 0
    fallbacks: int = 0


@dataclass(slots=True)
class LayerProbe:
    """One layer's sparse rows seen from both paths, for fidelity measurements (probe on).

    `sparse` is what the sparse path gives before the trust check: attention over the selected
    blocks, compensated for the mass left out when SparseConfig.compensate is on."""

    layer: int
    request_ids: list[str]
    sparse: torch.Tensor  # [R, H, D] the selection's output (compensated when on)
    dense: torch.Tensor  # [R, H, D] full attention
    used: torch.Tensor  # [R, H, D] what the layer went on with (after fallbacks)
    fell_back: torch.Tensor  # [R, KVH] bool
    estimate: torch.Tensor  # [R, KVH, G] estimated left-out mass per query head
    left_out: torch.Tensor  # [R, KVH, G] the true left-out mass


class SparseDecoder:
    def __init__(
        self,
        cfg: SparseConfig,
        num_layers: int,
        kv_heads: int,
        num_blocks: int,
        block_size: int,
        head_dim: int,
        device: torch.device,
        dtype: torch.dtype,
    ):
        self.block_size = block_size
        self.index = BlockIndex(
            num_layers, kv_heads, num_blocks, head_dim, device, dtype, compensation=cfg.compensate
        )
        # Built (or loaded from its cache) now, so a first compile never lands on a request.
        self.fused = torch.device(device).type == "cpu" and sparse_native.load() is not None
        self.stats = SparseStats()
        self.probe: Callable[[LayerProbe], None] | None = None
        self._modes: dict[str, bool] = {}
        self._requests: dict[str, RequestSparse] = {}
        self.sums = RunningSums(self.index)
        self.num_layers = num_layers
        # The layer policy times each layer's call: on the CPU, where the call's time is the
        # work's (a CUDA launch returns before its kernel runs), so elsewhere every layer reads
        # the configured budget.
        self.timed = torch.device(device).type == "cpu"
        self.clock: Callable[[], float] = time.perf_counter
        self.cfg = cfg  # the setter lays out the budget ladder and the layer policy
        self._prepared: _Prepared | None = None
        self.layouts = 0  # cumulative step layouts built from scratch (_prepare)

    @property
    def cfg(self) -> SparseConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: SparseConfig) -> None:
        """A new configuration: its budget ladder, and a layer policy that starts afresh."""
        self._cfg = cfg
        levels = cfg.levels
        self.level_cfgs = [cfg.at_level(k) for k in range(len(levels))]
        adapts = len(levels) > 1 and self.timed
        kv_heads = self.index.entries.shape[1]
        self.layers = LayerBudgets(self.num_layers, levels, kv_heads) if adapts else None

    # -- requests ------------------------------------------------------------------------------
    def register(self, request_id: str, sparse: bool | None) -> None:
        """sparse None: the configured default."""
        self._modes[request_id] = self.cfg.enabled if sparse is None else sparse
        self._requests[request_id] = RequestSparse()

    def forget(self, request_id: str) -> RequestSparse:
        self._modes.pop(request_id, None)
        self.sums.drop(request_id)
        if self._prepared is not None and request_id in self._prepared.request_ids:
            self._prepared = None
        return self._requests.pop(request_id, None) or RequestSparse()

    def commit_hook(self, then: CommitHook | None) -> CommitHook:
        """A BlockPool on_commit that marks the block for the index, then calls `then`: blocks
        copied in from the KV tier store reach the index this way."""
        mark = self.index.mark_one
        if then is None:
            return mark

        def both(block_id: int, block_hash: int) -> None:
            mark(block_id, block_hash)
            then(block_id, block_hash)

        return both

    def record_dense(self, layout: Layout, kv_heads: int) -> None:
        """Count one layer of a step's sparse rows run with dense attention by the policy."""
        st = self.stats
        st.dense_layer_steps += len(layout.nblocks)
        st.group_steps += len(layout.nblocks) * kv_heads
        blocks = sum(layout.nblocks) * kv_heads
        st.blocks_dense += blocks
        st.blocks_read += blocks

    def record(
        self,
        request_ids: list[str],
        failed_heads: list[int],
        layout: Layout,
        kv_heads: int,
        dense_heads: int = 0,
    ) -> None:
        """Count one layer of a step's sparse rows; failed_heads[i]: row i's KV head groups
        recomputed with full attention; dense_heads: the groups every row ran dense outright."""
        st = self.stats
        st.layer_steps += len(request_ids)
        sparse_heads = kv_heads - dense_heads
        for rid, n_fail, blocks, budget in zip(
            request_ids, failed_heads, layout.nblocks, layout.budgets
        ):
            st.blocks_dense += blocks * kv_heads
            st.blocks_read += budget * sparse_heads + blocks * (n_fail + dense_heads)
            st.group_steps += kv_heads
            st.groups_kept += sparse_heads - n_fail
            fell = int(n_fail > 0)
            st.fallbacks += fell
            st.partly_dense += int(not fell and dense_heads > 0)
            req = self._requests.get(rid)
            if req is not None:
                req.layer_steps += 1
                req.fallbacks += fell

    # -- one step ------------------------------------------------------------------------------
    def plan(
        self,
        kv: torch.Tensor,
        request_ids: list[str],
        slices: list[SeqSlice],
        decode_group: Group | None,
        native: bool,
    ) -> SparseStep | None:
        """Bring the index up to date and pick this step's sparse rows (None: there are none).

        request_ids[i] and slices[i] describe the same sequence; the decode group holds the
        slices with one new token, in order. The marked blocks are summarized only at a step
        with a request on the path: until then nothing reads an entry, and the marks wait (a
        prefix block a dense request filled is summarized when a request on the path first
        runs with it)."""
        if any(self._modes.get(rid, False) for rid in request_ids):
            self.index.refresh(kv)
        bs = self.block_size
        for rid, s in zip(request_ids, slices):
            first = s.context_len - s.num_new
            # blocks whose last slot this step writes: full after it, summarized at the next
            self.index.mark(s.block_ids[i] for i in range(first // bs, s.context_len // bs))
            if s.num_new != 1:
                # a prefill chunk: the request's running sum follows the blocks summarized so
                # far (every block before the chunk), so its first decode step adds a block or
                # two; a recompute rewriting summed blocks is caught by their generations
                if self.cfg.compensate and self._modes.get(rid, False):
                    self.sums.update(rid, s.block_ids, first // bs)
                if self._prepared is not None and rid in self._prepared.request_ids:
                    self._prepared = None
        if decode_group is None:
            return None
        rows: list[int] = []
        ids: list[str] = []
        row_slices: list[SeqSlice] = []
        row = 0
        for rid, s in zip(request_ids, slices):
            if s.num_new != 1:
                continue
            if self._modes.get(rid, False) and self.cfg.applies(s.context_len, bs):
                rows.append(row)
                ids.append(rid)
                row_slices.append(s)
            row += 1
        if not rows:
            return None
        self.stats.decode_rows += len(rows)
        nblocks = [-(-s.context_len // bs) for s in row_slices]
        prep = self._prepared
        if (
            prep is None
            or prep.cfg is not self.cfg
            or not prep.holds(row, rows, ids, nblocks, row_slices)
        ):
            prep = self._prepared = self._prepare(kv, decode_group, row, rows, ids, row_slices)
        else:
            prep.advance(decode_group, row_slices, bs)
        all_rows = prep.all_rows
        return SparseStep(
            decoder=self,
            prepared=prep,
            sparse_rows=prep.sparse_rows,
            token_index=decode_group.token_index
            if all_rows
            else decode_group.token_index.index_select(0, prep.sparse_rows),
            request_ids=ids,
            dense=_subgroup(decode_group, prep.keep) if prep.keep.numel() else None,
            dense_rows=prep.keep,
            native=native,
            fused=native and self.fused,
            all_rows=all_rows,
        )

    def _prepare(
        self,
        kv: torch.Tensor,
        decode_group: Group,
        row: int,
        rows: list[int],
        ids: list[str],
        row_slices: list[SeqSlice],
    ) -> _Prepared:
        """Lay out the sparse rows from scratch (Layout, LeftOut): their first step, or the first
        after one of them began a block."""
        bs = self.block_size
        device = kv.device
        self.layouts += 1
        sparse_rows = torch.tensor(rows, dtype=torch.int64, device=device)
        chosen = set(rows)
        keep = torch.tensor(
            [r for r in range(row) if r not in chosen], dtype=torch.int64, device=device
        )
        all_rows = rows == list(range(row))
        layout = Layout.build(
            decode_group.block_tables
            if all_rows
            else decode_group.block_tables.index_select(0, sparse_rows),
            decode_group.context_lens
            if all_rows
            else decode_group.context_lens.index_select(0, sparse_rows),
            self.cfg,
            bs,
            pool_blocks=kv.shape[3],
        )
        left_out = totals = None
        if self.cfg.compensate:
            # the blocks before this step's token: summarized by the refresh above
            totals = torch.stack(
                [
                    self.sums.update(rid, s.block_ids, (s.context_len - 1) // bs)
                    for rid, s in zip(ids, row_slices)
                ]
            )
            left_out = LeftOut.build(layout, totals, bs)
        return _Prepared(
            cfg=self.cfg,
            decode_rows=row,
            rows=rows,
            request_ids=ids,
            nblocks=list(layout.nblocks),
            context_lens=[s.context_len for s in row_slices],
            tables=[list(s.block_ids) for s in row_slices],
            layout=layout,
            left_out=left_out,
            sparse_rows=sparse_rows,
            keep=keep,
            all_rows=all_rows,
            totals=totals,
            pool_blocks=kv.shape[3],
            block_size=bs,
        )


@dataclass(slots=True)
class _Prepared:
    """A step's layout of its sparse rows, kept for the steps after it.

    Everything a row's Layout and LeftOut hold depends on its block table and on how many blocks
    its context spans, except the context length itself and the length of the block being
    written. While the same rows decode in the same blocks (every step between two block
    boundaries), the next step updates those two and keeps the rest, instead of building them
    every step (measurements: docs/design/sparse.md). A row that runs a prefill chunk (a
    recompute may rewrite its blocks) drops the whole entry (SparseDecoder.plan)."""

    cfg: SparseConfig  # the configuration it was laid out by
    decode_rows: int  # rows in the decode group
    rows: list[int]  # the sparse rows among them
    request_ids: list[str]
    nblocks: list[int]  # blocks each row's context spans
    context_lens: list[int]  # each row's context at the last step laid out
    tables: list[list[int]]  # each row's block ids, copied when laid out
    layout: Layout
    left_out: LeftOut | None
    sparse_rows: torch.Tensor
    keep: torch.Tensor  # the decode group's other rows
    all_rows: bool
    totals: torch.Tensor | None  # compensation's sums of the rows' full blocks, LeftOut.build's
    pool_blocks: int
    block_size: int
    # the layouts of the budget ladder's other levels, built when a layer first asks for one
    # (None: that level's budget covers a row's whole context, so it is dense attention)
    others: dict[int, tuple[Layout, LeftOut | None] | None] = field(default_factory=dict)

    def view(self, level: int) -> tuple[Layout, LeftOut | None] | None:
        """The rows laid out at the ladder's `level` (0: the configured budget), with their
        compensation; None when that budget reads some row's whole context."""
        if level == 0:
            return self.layout, self.left_out
        if level in self.others:
            return self.others[level]
        cfg = self.cfg.at_level(level)
        got: tuple[Layout, LeftOut | None] | None = None
        # built in a layer's forward, kept and updated in place by the next steps' plans,
        # which run outside inference mode: so not inference tensors
        if all(cfg.applies(n, self.block_size) for n in self.context_lens):
            with torch.inference_mode(False):
                got = self._build(cfg)
        self.others[level] = got
        return got

    def _build(self, cfg: SparseConfig) -> tuple[Layout, LeftOut | None]:
        base = self.layout
        layout = Layout.build(
            base.block_tables, base.context_lens, cfg, self.block_size, self.pool_blocks
        )
        left = None if self.totals is None else LeftOut.build(layout, self.totals, self.block_size)
        return layout, left

    def holds(
        self,
        decode_rows: int,
        rows: list[int],
        ids: list[str],
        nblocks: list[int],
        slices: list[SeqSlice],
    ) -> bool:
        """Whether this step's sparse rows are the same requests, each one token further on
        in the same blocks."""
        return (
            decode_rows == self.decode_rows
            and rows == self.rows
            and ids == self.request_ids
            and nblocks == self.nblocks
            and all(s.context_len == n + 1 for s, n in zip(slices, self.context_lens))
            and all(s.block_ids == t for s, t in zip(slices, self.tables))
        )

    def advance(self, decode_group: Group, slices: list[SeqSlice], block_size: int) -> None:
        """This step's context lengths, and the tokens read from the block being written."""
        self.context_lens = [s.context_len for s in slices]
        lens = (
            decode_group.context_lens
            if self.all_rows
            else decode_group.context_lens.index_select(0, self.sparse_rows)
        )
        last = torch.tensor(
            [s.context_len - (n - 1) * block_size for s, n in zip(slices, self.nblocks)],
            dtype=self.layout.block_lens.dtype,
            device=self.layout.block_lens.device,
        )
        built = [self.layout, *(v[0] for v in self.others.values() if v is not None)]
        for lay in built:
            lay.context_lens = lens
            at = lay.fixed_ids.shape[-1] - 1  # the fixed blocks end with the one being written
            lay.block_lens[:, 0, at] = last
            lay.pair_block_lens = None  # laid out again per pair by the first layer


@dataclass(slots=True)
class SparseStep:
    """One step's sparse rows; `attend` runs one layer's decode group with them."""

    decoder: SparseDecoder
    prepared: _Prepared  # the rows' layouts per budget level and compensation's sums
    sparse_rows: torch.Tensor  # [R] rows of the decode group
    token_index: torch.Tensor  # [R] their rows in the step's flattened tokens
    request_ids: list[str]
    dense: Group | None  # the other decode rows
    dense_rows: torch.Tensor
    native: bool  # fallbacks through the dense decode kernel
    fused: bool  # selection and attention through sparse_kernels.cpp
    all_rows: bool = False  # the sparse rows are the whole decode group, in order

    @property
    def layout(self) -> Layout:
        """The rows laid out at the configured budget (the ladder's level 0)."""
        return self.prepared.layout

    @property
    def left_out(self) -> LeftOut | None:
        """Compensation's sums at the configured budget (None: compensation off)."""
        return self.prepared.left_out

    def attend(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        group: Group,
        scale: float,
        layer: int,
        dense_decode: DenseDecode,
    ) -> torch.Tensor:
        """The decode group's output [S, H, D], its sparse rows through the sparse path at the
        budget level the layer policy chose (or the whole group dense, where it chose that)."""
        d = self.decoder
        policy = d.layers
        level = 0 if policy is None else policy.choose(layer)
        dense = () if policy is None or level is None else policy.dense_groups(layer, level)
        if policy is None or d.probe is not None:
            # untimed without a policy, or while the probe computes full attention beside
            # every sparse layer
            return self._attend(
                q, k_cache, v_cache, group, scale, layer, dense_decode, level, dense
            )[0]
        started = d.clock()
        out, fails = self._attend(
            q, k_cache, v_cache, group, scale, layer, dense_decode, level, dense
        )
        policy.observe(layer, level, self.sparse_rows.numel(), d.clock() - started, fails)
        return out

    def _attend(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        group: Group,
        scale: float,
        layer: int,
        dense_decode: DenseDecode,
        level: int | None,
        dense_groups: tuple[bool, ...] = (),
    ) -> tuple[torch.Tensor, list[int]]:
        """`attend` at one budget level, or the whole group dense (level None), with the KV
        head groups dense_groups marks run dense outright -> the output, and per KV head group
        the rows whose group fell back."""
        d = self.decoder
        kv_heads = k_cache.shape[0]
        view = None if level is None else self.prepared.view(level)
        if level is None or view is None:
            d.record_dense(self.prepared.layout, kv_heads)
            return dense_decode(group), []
        if not any(dense_groups):
            dense_groups = ()
        layout, left_out = view
        cfg = d.level_cfgs[level]
        # the index is per physical block of this cache: its flat ids are the cache's
        assert d.index.entries.shape[2] == k_cache.shape[1], "index and cache differ in blocks"
        _, heads, dim = q.shape
        g = heads // kv_heads
        r = self.sparse_rows.numel()
        # a step of decode rows only, every one sparse: q's rows are the pairs' rows in order
        qp = (
            q if self.all_rows and q.shape[0] == r else q.index_select(0, self.token_index)
        ).reshape(r * kv_heads, g, dim)
        forced = (
            torch.tensor(dense_groups * r, dtype=torch.bool, device=q.device)
            if dense_groups
            else None
        )
        if d.probe is None and self.fused and d.index.compensation == (left_out is not None):
            # the fallbacks and the forced groups come back as full attention
            used, fail = self._fused(qp, k_cache, v_cache, scale, layer, level, forced)
            fails = fail.tolist()
            redo: list[int] = []
        else:
            sel = select_blocks(
                qp.view(r, kv_heads, g, dim),
                d.index,
                layer,
                layout,
                cfg,
                d.block_size,
                scale,
                self.fused,
            )
            flat = sel.flat_ids
            got, lse = attend_blocks(qp, k_cache, v_cache, flat, sel.block_lens, scale, self.fused)
            if left_out is not None:
                vsum, log_comp = d.index.vsum, sel.log_left_comp
                if vsum is None or log_comp is None:
                    raise RuntimeError(
                        "compensation is configured but the index was built without it"
                    )
                got = left_out.apply(got, lse, log_comp, flat, vsum, layer, self.fused)
            # the trust check: E / (Z_in + E) > threshold, i.e. log E - log Z_in > logit(thr.)
            fail = (sel.log_left_out - lse).gt_(cfg.logit_threshold).any(dim=-1)  # [P]
            if forced is not None:
                fail &= ~forced
            fails = fail.tolist()
            used = got
            redo = [
                p for p, f in enumerate(fails) if f or (dense_groups and dense_groups[p % kv_heads])
            ]
        if d.probe is not None:
            estimate = left_out_mass(sel.log_left_out, lse)  # [P, G]
            full, full_lse = self._full(
                qp,
                k_cache,
                v_cache,
                torch.arange(r * kv_heads, device=q.device),
                scale,
                native=False,
                fused=self.fused,
            )
            assert full_lse is not None, "attention with native off returns its lse"
            redone = fail if forced is None else fail | forced
            used = torch.where(redone[:, None, None], full, got)
            d.probe(
                LayerProbe(
                    layer=layer,
                    request_ids=list(self.request_ids),
                    sparse=got.view(r, heads, dim),
                    dense=full.view(r, heads, dim),
                    used=used.view(r, heads, dim),
                    fell_back=fail.view(r, kv_heads),
                    estimate=estimate.view(r, kv_heads, g),
                    left_out=(-torch.expm1(lse - full_lse)).view(r, kv_heads, g),
                )
            )
        elif redo:
            failed = torch.tensor(redo, dtype=torch.int64, device=q.device)
            used.index_copy_(
                0, failed, self._full(qp, k_cache, v_cache, failed, scale, self.native)[0]
            )
        d.record(
            self.request_ids,
            [sum(fails[i * kv_heads : (i + 1) * kv_heads]) for i in range(r)],
            layout,
            kv_heads,
            sum(dense_groups),
        )
        group_fails = [sum(fails[h::kv_heads]) for h in range(kv_heads)]
        if self.dense is None and self.all_rows:
            # every row sparse, in order: nothing to merge
            return used.view(r, heads, dim), group_fails
        out = q.new_empty((group.token_index.numel(), heads, dim))
        if self.dense is not None:
            out.index_copy_(0, self.dense_rows, dense_decode(self.dense))
        out.index_copy_(0, self.sparse_rows, used.view(r, heads, dim))
        return out, group_fails

    def _fused(
        self,
        qp: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        scale: float,
        layer: int,
        level: int = 0,
        dense: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Selection, attention over it, compensation, the trust check and its fallback of
        every pair in one call (sparse_kernels.cpp's sparse_decode: the same passes as
        select_blocks, attend_blocks and LeftOut.apply with fused on, so the same numbers for
        the pairs that pass) -> the output [P, G, D] and which pairs failed the check [P] bool.
        A failed pair's output, and that of a pair `dense` [P] bool marks (which skips the
        selection), is full attention over its row's context, its blocks split over the
        threads."""
        d = self.decoder
        ops = sparse_native.load()
        assert ops is not None, "fused is set only when the sparse kernels loaded"
        kv_heads, _, block_size, dim = k_cache.shape
        view = self.prepared.view(level)
        assert view is not None, "a level is run only where its budget leaves blocks out"
        lay, left = view
        vsum = d.index.vsum
        assert (left is None) == (vsum is None), "fused runs only when the index matches the step"
        r = lay.mid_counts.shape[0]
        entries = d.index.entries[layer]
        none = qp.new_empty(0, dtype=torch.float32)
        return ops.sparse_decode(
            qp,
            entries.view(kv_heads, entries.shape[1], -1),
            lay.mid_ids.view(r, -1),
            lay.mid_counts,
            lay.takes,
            lay.fixed_ids.view(r, -1),
            lay.picks,
            scale,
            d.cfg.estimate == "moment",
            math.log(block_size),
            left is not None,
            RANGE_SIGMAS,
            k_cache.reshape(-1, block_size, dim),
            v_cache.reshape(-1, block_size, dim),
            lay.pair_lens(kv_heads),
            none if left is None else left.per_token[layer],
            none if left is None else left.weights,
            none if vsum is None else vsum[layer].view(-1, dim),
            d.cfg.logit_threshold,
            qp.new_zeros(qp.shape[0], dtype=torch.bool) if dense is None else dense,
            lay.block_tables,
            lay.context_lens,
        )

    def _full(
        self,
        qp: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        pairs: torch.Tensor,
        scale: float,
        native: bool,
        fused: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Full attention of some pairs over all their row's blocks (the fallback)."""
        kv_heads, num_blocks = k_cache.shape[0], k_cache.shape[1]
        row = pairs // kv_heads
        lay = self.prepared.layout  # every level's rows have the same tables and lengths
        flat = lay.block_tables.index_select(0, row) + ((pairs % kv_heads) * num_blocks)[:, None]
        return attend_full(
            qp.index_select(0, pairs),
            k_cache,
            v_cache,
            flat,
            lay.context_lens.index_select(0, row),
            scale,
            native,
            fused,
        )


def _subgroup(g: Group, rows: torch.Tensor) -> Group:
    """Some rows of a decode group (one query each), as a group of their own."""
    return Group(
        token_index=g.token_index.index_select(0, rows),
        valid=g.valid.index_select(0, rows),
        block_tables=g.block_tables.index_select(0, rows),
        queries=g.queries,
        context_lens=g.context_lens.index_select(0, rows),
        positions=g.positions.index_select(0, rows),
        block_size=g.block_size,
    )
