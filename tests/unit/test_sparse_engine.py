"""Sparse decode inside the engine: bit-for-bit dense outputs when the path is off or the context
is short, the trust check falling back exactly when its estimate passes the threshold, fidelity
on the long-context dummy model (closer to dense with the left-out mass compensated), counters,
and the index under prefix sharing and tier loads."""

from __future__ import annotations

import math

import pytest
import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams
from strata.engine.sparse import LayerProbe, SparseConfig, SparseDecoder
from strata.engine.sparse.fidelity import teacher_forced
from strata.engine.sparse.layers import WINDOW

BS = 16


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    return load_dummy("dummy-tiny")


def prompt(n: int, seed: int = 1, vocab: int = 512) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run(engine: LLMEngine, reqs: list[EngineRequest]) -> dict[str, list[tuple[int, float]]]:
    """Every request to its end: (token, logprob) per step, and the finished outputs."""
    for r in reqs:
        engine.add_request(r)
    out: dict[str, list[tuple[int, float]]] = {r.request_id: [] for r in reqs}
    engine.finished = {}
    while engine.has_work():
        for o in engine.step():
            out[o.request_id].append((o.token_ids[0], o.logprobs[0].logprob))
            if o.finished:
                engine.finished[o.request_id] = o
    return out


def same_steps(a: list[tuple[int, float]], b: list[tuple[int, float]], tol: float = 1e-5) -> bool:
    """The same tokens with logprobs within `tol`: a prompt prefilled from the prefix cache runs
    its attention over other chunk shapes, whose float32 sums may round differently."""
    return [t for t, _ in a] == [t for t, _ in b] and all(
        abs(x - y) <= tol for (_, x), (_, y) in zip(a, b)
    )


def req(rid: str, ids: list[int], steps: int = 6, sparse: bool | None = None) -> EngineRequest:
    return EngineRequest(
        rid, ids, SamplingParams(max_tokens=steps, ignore_eos=True, logprobs=1), sparse=sparse
    )


def engine(loaded, sparse: SparseConfig | None, kernel: str = "cpp", blocks: int = 160):
    return LLMEngine(
        loaded,
        EngineConfig(
            num_blocks=blocks, max_batched_tokens=512, attention_kernel=kernel, sparse=sparse
        ),
    )


@pytest.mark.parametrize("kernel", ["cpp", "torch"])
def test_outputs_are_bit_for_bit_dense_when_off_short_or_opted_out(tiny, kernel):
    ids, short = prompt(1100), prompt(300, seed=2)
    dense = run(engine(tiny, None, kernel), [req("a", ids), req("s", short)])
    on = SparseConfig(enabled=True, min_context=512, budget_fraction=0.25, threshold=1.0)
    cases = {
        "default off": (SparseConfig(enabled=False, min_context=512), None),
        "request off": (on, False),
        "below min_context": (SparseConfig(enabled=True, min_context=2000), None),
    }
    for name, (cfg, choice) in cases.items():
        e = engine(tiny, cfg, kernel)
        got = run(e, [req("a", ids, sparse=choice), req("s", short)])
        assert got == dense, name
        assert e.sparse.stats.layer_steps == 0, name
    # the same engine with the path on for the long request changes its numbers, not the short's
    e = engine(tiny, on, kernel)
    got = run(e, [req("a", ids), req("s", short)])
    assert got["s"] == dense["s"]
    assert [lp for _, lp in got["a"]] != [lp for _, lp in dense["a"]]


def test_counters_count_rows_layers_and_blocks(tiny):
    cfg = SparseConfig(
        enabled=True,
        min_context=1024,
        budget_fraction=0.25,
        sink_blocks=1,
        window_blocks=2,
        threshold=1.0,
        adaptive=False,  # every layer at the configured budget: the counts below are its
    )
    e = engine(tiny, cfg)
    ids = prompt(1000)
    run(e, [req("a", ids, steps=40)])
    # the first token comes from the prefill; decode rows have contexts 1001..1039
    rows = [n for n in range(1001, 1040) if n >= 1024]
    blocks = [-(-n // BS) for n in rows]
    budgets = [max(math.ceil(0.25 * b), 4) for b in blocks]
    layers, kv_heads = 2, 2
    s = e.sparse.stats
    assert (s.decode_rows, s.layer_steps, s.fallbacks) == (len(rows), len(rows) * layers, 0)
    assert s.blocks_dense == sum(blocks) * layers * kv_heads
    assert s.blocks_read == sum(budgets) * layers * kv_heads
    done = e.finished["a"]
    assert (done.sparse_layer_steps, done.sparse_fallbacks) == (len(rows) * layers, 0)


def same_as_dense(got, dense) -> None:
    """The same tokens, and logprobs within float rounding: a fallback is full attention with
    its blocks split over the threads, the dense path's sums in another order."""
    assert got.keys() == dense.keys()
    for rid in dense:
        assert [t for t, _ in got[rid]] == [t for t, _ in dense[rid]], rid
        assert [lp for _, lp in got[rid]] == pytest.approx([lp for _, lp in dense[rid]], abs=1e-4)


def test_a_zero_threshold_falls_back_everywhere_to_the_dense_numbers(tiny):
    ids = prompt(1100)
    dense = run(engine(tiny, None), [req("a", ids)])
    e = engine(
        tiny, SparseConfig(enabled=True, min_context=512, budget_fraction=0.25, threshold=0.0)
    )
    same_as_dense(run(e, [req("a", ids)]), dense)
    s = e.sparse.stats
    assert s.fallbacks == s.layer_steps == 5 * 2
    assert e.finished["a"].sparse_fallbacks == 10


@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_each_layer_settles_on_the_option_that_measured_cheapest(tiny, threshold):
    """The adaptive policy (layers.py) with a clock that reads the blocks read so far, so a
    call's "time" is the blocks it read: each layer measures the smallest budget, the next one
    and dense for a window each, then runs the cheapest. With a check that always fails (0),
    each level's first window of fallbacks marks every KV head group dense outright, so no
    fallback follows (every option then reads as much as dense); with one that never fails
    (1), the smallest budget. With the first, the tokens stay the dense path's."""
    ids, steps = prompt(1100), 100
    dense = run(engine(tiny, None), [req("a", ids, steps=steps)])
    cfg = SparseConfig(enabled=True, min_context=512, budget_fraction=0.25, threshold=threshold)
    assert cfg.levels == (0.25, 0.5)
    e = engine(tiny, cfg)
    e.sparse.clock = lambda: float(e.sparse.stats.blocks_read)
    got = run(e, [req("a", ids, steps=steps)])
    if threshold == 0.0:
        same_as_dense(got, dense)
    layers, decode_steps = 2, steps - 1  # the first token comes from the prefill
    s = e.sparse.stats
    if threshold == 0.0:
        policy = e.sparse.layers
        assert all(policy.dense_groups(n, k) == (True, True) for n in range(2) for k in range(2))
        assert s.fallbacks == 2 * WINDOW * layers  # the first window at levels 0 and 1
        assert s.layer_steps + s.dense_layer_steps == decode_steps * layers
        assert s.partly_dense == s.layer_steps - s.fallbacks
        assert s.groups_kept == 0 and s.group_steps == decode_steps * layers * 2
    else:
        assert e.sparse.layers.levels() == [0, 0]
        assert s.fallbacks == 0 and s.dense_layer_steps == WINDOW * layers
        assert s.layer_steps == (decode_steps - WINDOW) * layers


def test_layers_are_not_timed_while_the_probe_computes_full_attention_beside_them(tiny):
    cfg = SparseConfig(enabled=True, min_context=512, budget_fraction=0.25, threshold=0.0)
    e = engine(tiny, cfg)
    e.sparse.clock = lambda: float(e.sparse.stats.blocks_read)
    probes: list[LayerProbe] = []
    e.sparse.probe = probes.append
    run(e, [req("a", prompt(1100), steps=4 * WINDOW)])
    # without the probe each layer would have moved on after WINDOW calls
    assert e.sparse.layers.levels() == [0, 0]
    assert len(probes) == (4 * WINDOW - 1) * 2


def decoder_case(estimate: str):
    """One row of 20 blocks (4 tokens in the last), two KV heads whose keys are nearly alike
    (uniform attention), but for one key in head 0's window that its queries score 8.5 nats
    above the rest."""
    gen = torch.Generator().manual_seed(21)
    layers, kv_heads, nb, dim, g = 1, 2, 24, 8, 2
    kv = torch.randn(layers, 2, kv_heads, nb, BS, dim, generator=gen)
    kv[0, 0] *= 0.01
    cfg = SparseConfig(
        enabled=True,
        min_context=1,
        budget_blocks=8,
        sink_blocks=1,
        window_blocks=2,
        estimate=estimate,
        threshold=1.0,
    )
    dec = SparseDecoder(cfg, layers, kv_heads, nb, BS, dim, torch.device("cpu"), torch.float32)
    table = list(range(3, 23))
    dec.index.summarize(kv, table[:-1])
    dec.register("r", True)
    q = torch.randn(1, kv_heads * g, dim, generator=gen)
    q[0, :2] = torch.tensor([4.0] + [0.0] * 7)
    kv[0, 0, 0, table[18], 5] = torch.tensor([6.0] + [0.0] * 7)
    dec.index.summarize(kv, table[:-1])
    return kv, dec, table, q


def run_layer(kv, dec, table, q, native=False) -> tuple[torch.Tensor, list[LayerProbe]]:
    slices = [SeqSlice(0, 1, 19 * BS + 4, table)]
    meta = AttentionMetadata.build(slices, BS, "cpu", native)
    step = dec.plan(kv, ["r"], slices, meta.groups[0], native)
    probes: list[LayerProbe] = []
    dec.probe = probes.append
    out = step.attend(q, kv[0, 0], kv[0, 1], meta.groups[0], 8**-0.5, 0, lambda g: None)
    dec.probe = None
    return out, probes


def test_fallback_happens_exactly_when_the_estimate_passes_the_threshold():
    kv, dec, table, q = decoder_case("bound")
    _, (probe,) = run_layer(kv, dec, table, q)
    # the bound estimate, recomputed here from its definition: each left-out block's keys all
    # at its bound, against the exact partition function of the blocks read
    scale = 8**-0.5
    for h in range(2):
        keys = kv[0, 0, h, table].reshape(-1, 8)[: 19 * BS + 4].double()
        q_h = q[0, 2 * h : 2 * h + 2].double()
        scores = q_h @ keys.T * scale
        read = torch.zeros(20, dtype=torch.bool)
        read[[table.index(b) for b in dec_selected(dec, kv, table, q, h)]] = True
        keyread = read.repeat_interleave(BS)[: 19 * BS + 4]
        z_in = torch.logsumexp(scores[:, keyread], -1)
        box = torch.stack(
            [
                (
                    q_h.clamp(min=0) @ dec.index.kmax[0, h, b].double()
                    + q_h.clamp(max=0) @ dec.index.kmin[0, h, b].double()
                )
                * scale
                for b in table[:-1]
            ],
            -1,
        )
        left = ~read[:-1]
        log_e = torch.logsumexp(box[:, left] + math.log(BS), -1)
        want = torch.sigmoid(log_e - z_in)
        assert torch.allclose(probe.estimate[0, h].double(), want, rtol=1e-4)
    top = probe.estimate[0].amax(-1)  # [KVH]: each group's largest estimate
    assert top[1] > top[0]
    for threshold, fell in (
        (float(top[0]) * 0.999, [True, True]),
        ((float(top[0]) + float(top[1])) / 2, [False, True]),
        (float(top[1]) * 1.001, [False, False]),
    ):
        dec.cfg = SparseConfig(
            enabled=True,
            min_context=1,
            budget_blocks=8,
            sink_blocks=1,
            window_blocks=2,
            estimate="bound",
            threshold=threshold,
        )
        before = dec.stats.fallbacks
        out, (p,) = run_layer(kv, dec, table, q)
        assert p.fell_back[0].tolist() == fell
        assert dec.stats.fallbacks - before == int(any(fell))
        for h in range(2):
            rows = slice(2 * h, 2 * h + 2)
            want = p.dense[0, rows] if fell[h] else p.sparse[0, rows]
            assert torch.equal(out[0, rows], want)
            assert torch.equal(p.used[0, rows], want)


def dec_selected(dec, kv, table, q, head) -> list[int]:
    """The physical blocks the decoder reads for KV head `head` (without running attention)."""
    from strata.engine.sparse.select import select_blocks

    slices = [SeqSlice(0, 1, 19 * BS + 4, table)]
    meta = AttentionMetadata.build(slices, BS, "cpu", False)
    step = dec.plan(kv, ["r"], slices, meta.groups[0], False)
    sel = select_blocks(q.view(1, 2, 2, 8), dec.index, 0, step.layout, dec.cfg, BS, 8**-0.5)
    return [b for b, n in zip(sel.block_ids[head].tolist(), sel.block_lens[head].tolist()) if n]


def test_moment_estimate_tracks_the_true_mass_left_out():
    kv, dec, table, q = decoder_case("moment")
    _, (probe,) = run_layer(kv, dec, table, q)
    est, true = probe.estimate[0], probe.left_out[0]
    # uniform attention (head 1): 12 of 19 full blocks left out, and the estimate knows it
    assert true[1].tolist() == pytest.approx([12 * BS / (19 * BS + 4)] * 2, abs=0.02)
    assert torch.allclose(est[1], true[1], atol=0.02)
    assert true[0].tolist() == pytest.approx([0.038] * 2, abs=0.002)
    assert torch.allclose(est[0], true[0], atol=0.002)


def test_cosine_against_dense_on_the_long_context_dummy():
    loaded = load_dummy("dummy-long")
    e = LLMEngine(
        loaded,
        EngineConfig(
            num_blocks=160,
            max_batched_tokens=1024,
            sparse=SparseConfig(
                enabled=True, min_context=1024, budget_fraction=0.25, threshold=1.0
            ),
        ),
    )
    ids = prompt(2048, vocab=512)
    tf = teacher_forced(e, ids, prompt(8, seed=3, vocab=512))
    assert bool(tf.sparse_steps.all())
    assert float(tf.cosine_selected.min()) >= 0.99
    assert torch.equal(tf.cosine, tf.cosine_selected)  # nothing fell back
    assert tf.top1_agreement == 1.0
    assert (tf.estimate.amax(-1) < 0.1).all()
    assert e.sparse.stats.layer_steps == 8 * 4 and not e.has_work()
    assert e.pool.num_free == 160


def test_compensation_brings_the_long_context_dummy_closer_to_dense():
    loaded = load_dummy("dummy-long")
    ids, more = prompt(2048, vocab=512), prompt(8, seed=3, vocab=512)
    gap, logits = {}, {}
    for compensate in (False, True):
        # a small budget (8 of 128 blocks) leaves out up to 2% of the mass
        e = LLMEngine(
            loaded,
            EngineConfig(
                num_blocks=160,
                max_batched_tokens=1024,
                sparse=SparseConfig(
                    enabled=True,
                    min_context=1024,
                    budget_fraction=0.0625,
                    threshold=1.0,
                    compensate=compensate,
                ),
            ),
        )
        tf = teacher_forced(e, ids, more)
        assert bool(tf.sparse_steps.all())
        gap[compensate] = (1 - tf.cosine_selected.double()).mean().item()
        logits[compensate] = (tf.sparse_logits - tf.dense_logits).abs().max().item()
    assert gap[True] < gap[False] / 2
    assert logits[True] < logits[False]


def test_shared_prefix_blocks_share_entries_and_tier_copies_are_summarized(tiny):
    # one budget for both requests (the adaptive policy may move a layer between them)
    cfg = SparseConfig(
        enabled=True, min_context=512, budget_fraction=0.25, threshold=1.0, adaptive=False
    )
    e = engine(tiny, cfg)
    ids = prompt(700)
    first = run(e, [req("a", ids)])
    summarized = e.sparse.index.summarized
    # the second request finds the prompt's 43 full blocks in the prefix cache: nothing of them
    # is summarized again, and its sparse decode reads the same entries
    second = run(e, [req("b", ids)])
    assert same_steps(second["b"], first["a"])
    assert e.finished["b"].sparse_layer_steps == 5 * 2
    assert e.sparse.index.summarized - summarized == 1  # its own block filled while decoding
    # a block copied in from the KV tier store is summarized through the pool's commit hook
    (block,) = e.pool.allocate(1)
    keys = torch.randn(2, 2, BS, 16)
    e.kv[:, 0, :, block] = keys
    e.pool.commit(block, 0x5EED)
    e.sparse.index.refresh(e.kv)
    assert torch.equal(e.sparse.index.kmax[:, :, block], keys.amax(2))
    assert torch.equal(e.sparse.index.kmin[:, :, block], keys.amin(2))


def test_a_request_for_the_path_on_an_engine_without_it_is_refused(tiny):
    e = engine(tiny, None)
    with pytest.raises(ValueError, match="this worker runs without the sparse decode path"):
        e.add_request(req("a", prompt(10), sparse=True))
    e.add_request(req("b", prompt(10), sparse=False))


def test_blocks_are_summarized_only_once_a_request_on_the_path_runs(tiny):
    """Dense requests leave their full blocks marked, not summarized; a request on the path
    that then shares their prefix has them summarized before its first sparse step, and decodes
    as it does on an engine where it ran first."""
    cfg = SparseConfig(
        enabled=False, min_context=512, budget_fraction=0.25, threshold=1.0, adaptive=False
    )
    ids = prompt(700)
    e = engine(tiny, cfg)
    run(e, [req("dense", ids)])
    assert e.sparse.index.summarized == 0
    got = run(e, [req("b", ids, sparse=True)])
    assert e.sparse.index.summarized >= 700 // BS
    assert e.finished["b"].sparse_layer_steps == 5 * 2
    fresh = engine(tiny, cfg)
    want = run(fresh, [req("b", ids, sparse=True)])
    assert same_steps(got["b"], want["b"])
