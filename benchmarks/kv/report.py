"""docs/benchmarks/kv.md: the three configurations side by side, the store's own figures, and the
issue's targets with PASS/FAIL as measured."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.common.tables import pct as _pct
from benchmarks.common.targets import Verdict, target_table
from benchmarks.kv.results import MIB, ConfigResult, noise_floor, pair_ratios
from benchmarks.kv.sizing import Sizing
from benchmarks.kv.trace_scale import CacheFigures, Scaling


@dataclass(slots=True)
class KVBenchReport:
    command: str
    date: str
    machine: str
    setup: str  # model, dtype, threads, engine settings
    trace: str  # which trace and window
    scaling: Scaling
    figures: CacheFigures
    sizing: Sizing
    results: list[ConfigResult]
    targets: list[Verdict]
    notes: list[str] = field(default_factory=list)
    busy: str | None = None  # a warning when other work competed for the CPU
    raw_dir: str = "docs/benchmarks/raw"


def _ms(s: float) -> str:
    return f"{s * 1000:.0f}"


def render(r: KVBenchReport) -> str:
    s, f, z = r.scaling, r.figures, r.sizing
    rate = (
        "the trace's own arrival times"
        if s.rate is None
        else f"arrivals compressed to a mean of {s.rate:g} requests/s"
    )
    lines = [
        "# KV tier benchmark",
        "",
        f"Run {r.date} with `{r.command}`.",
        "",
        f"Machine: {r.machine}",
        "",
        *([r.busy, ""] if r.busy else []),
        f"Setup: {r.setup}",
        "",
        "## Workload",
        "",
        f"{r.trace} Each trace hash id (512 tokens) becomes {s.tokens_per_hash} synthetic "
        f"token ids drawn from a generator seeded with the id, so equal ids are equal tokens and "
        f"shared prefixes are really shared; a prompt is input_length x {s.tokens_per_hash}/512 "
        f"tokens (the last block cut in proportion), at most {s.max_hash_blocks} hash blocks "
        f"({s.max_prompt} tokens); output = min(output_length, {s.max_output}); {rate}. "
        f"Greedy sampling, EOS ignored.",
        "",
        f"- prompt blocks looked up (16 tokens, each prompt's last token excluded as the engine "
        f"does): {f.prompt_blocks}",
        f"- infinite-cache bound: {f.bound_blocks} of them were in an earlier prompt = "
        f"**{_pct(f.bound)}** (generated tokens never count)",
        f"- working set: {f.distinct_prompt_blocks} distinct prompt blocks + "
        f"{f.generated_blocks} blocks of generated tokens = {z.working_set_blocks} blocks = "
        f"{z.working_set_blocks * z.block_bytes / MIB:.1f} MiB "
        f"({z.block_bytes / 1024:.0f} KiB a block)",
        "",
        "## Configurations",
        "",
    ]
    lines += [f"- **{c.name}**: {c.description}" for c in r.results]
    lines += [
        "",
        "## Results",
        "",
        "Device KV memory counts blocks holding data (in use, or cached with a reusable "
        "prefix), sampled after every engine step; the mean is time-weighted from the "
        "first arrival to the last completion. Hits are shares of the prompt blocks looked "
        "up; latencies run from each request's scheduled arrival.",
        "",
        "| configuration | device pool MiB | peak device KV MiB | mean device KV MiB | "
        "device hits | tier hits | block-hit ratio (bound) | TTFT ms P50 / P99 | "
        "E2E ms P50 / P99 | completed | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in r.results:
        lines.append(
            f"| {c.name} | {c.pool_mib:.1f} | {c.peak_mib:.1f} | {c.mean_mib:.1f} | "
            f"{_pct(c.share(c.device_hit_blocks))} | {_pct(c.share(c.tier_hit_blocks))} | "
            f"{_pct(c.hit_ratio)} ({_pct(f.bound)}) | {_ms(c.ttft_p50_s)} / "
            f"{_ms(c.ttft_p99_s)} | {_ms(c.e2e_p50_s)} / {_ms(c.e2e_p99_s)} | "
            f"{c.completed}/{c.requests} | {c.wall_s:.0f} |"
        )
    lines += [
        "",
        "| configuration | engine steps | preemptions | device evictions | "
        "own cores | other work, cores |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in r.results:
        lines.append(
            f"| {c.name} | {c.steps} | {c.preemptions} | {c.evictions} | "
            f"{c.own_cores:.2f} | {c.other_cores:.2f} |"
        )
    lines += _round_lines(r.results)
    for c in r.results:
        if c.store is not None:
            lines += ["", f"### KV tier store ({c.name}, last round)", "", *_store_lines(c)]
    lines += [
        "",
        "## Targets (issue 5)",
        "",
        *target_table(r.targets),
    ]
    notes = [*r.notes, *(n for c in r.results for n in c.notes)]
    if notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    lines += [
        "",
        f"Per-request data: `{r.raw_dir}/kv-requests.jsonl`, summary "
        f"`{r.raw_dir}/kv.json`, store log `{r.raw_dir}/kv-store.log` (not in git).",
        "",
    ]
    return "\n".join(lines)


def _round_lines(results: list[ConfigResult]) -> list[str]:
    by_name = {c.name: c for c in results}
    device_only, tiered = by_name.get("device-only"), by_name.get("tiered")
    if device_only is None or tiered is None or len(tiered.rounds) < 2:
        return []
    out = [
        "",
        "### Rounds",
        "",
        "Device-only and tiered replay the window back to back in each round, their order "
        "alternating from round to round; the results above pool every round's requests.",
        "",
        "| round | ran first | device-only TTFT / E2E P50 ms | tiered TTFT / E2E P50 ms | "
        "tiered E2E P50 vs device-only | other work, cores |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    base = {x.round: x for x in device_only.rounds}
    for t, ratio in zip(tiered.rounds, pair_ratios(device_only, tiered)):
        d = base[t.round]
        first = "tiered" if t.position == 0 else "device-only"
        out.append(
            f"| {t.round + 1} | {first} | {_ms(d.ttft_p50_s)} / {_ms(d.e2e_p50_s)} | "
            f"{_ms(t.ttft_p50_s)} / {_ms(t.e2e_p50_s)} | {ratio:+.1%} | "
            f"{max(d.other_cores, t.other_cores):.2f} |"
        )
    floor = noise_floor(device_only)
    if floor is not None:
        out += [
            "",
            f"Noise floor: device-only's own P50 E2E moved {floor:.1%} between rounds "
            f"(highest over lowest) with nothing changed but the time it ran.",
        ]
    return out


def _store_lines(c: ConfigResult) -> list[str]:
    st = c.store
    assert st is not None
    looked = st.hits + st.misses
    out = [
        f"GetStats after the run: {st.blocks} blocks, {st.bytes_used / MIB:.1f} of "
        f"{st.bytes_capacity / MIB:.1f} MiB; blocks served {st.hits}, get misses "
        f"{st.misses}"
        + (f" ({_pct(st.hits / looked)} of blocks asked for)" if looked else "")
        + f", evictions {st.evictions}, checksum failures {st.checksum_failures}, "
        f"reservations refused {st.reserve_refused}."
    ]
    if st.tiers:
        out += [
            "",
            "| tier | blocks | MiB used / capacity | hits | evictions | migrations in |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {t.tier} | {t.blocks} | {t.bytes_used / MIB:.1f} / "
            f"{t.bytes_capacity / MIB:.1f} | {t.hits} | {t.evictions} | {t.migrations_in} |"
            for t in st.tiers
        ]
    else:
        out += [
            "",
            "The store reported no per-tier figures (KVStats.tiers is empty): it has "
            "one tier, host memory, and ignores STRATA_KVSTORE_DISK_BYTES.",
        ]
    return out
