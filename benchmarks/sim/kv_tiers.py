"""KV tiers and prefix-aware routing in the cluster simulator: the Mooncake synthetic trace on
simulated CPU nodes of the default model, replayed three ways in one run on the same requests.

    no tiers, load routing      today's simulator: the Router by load alone (ties drawn at
                                random), no prefix hashes; an evicted block is gone
    no tiers, prefix routing    the nodes report their device blocks to the prefix index and the
                                Router credits each node with the request's leading blocks it
                                holds (strata.policy.routing)
    tiers, prefix routing       every node also keeps evicted blocks in a host tier over a disk
                                tier (strata.sim.kv_tiers) and loads prefixes back from there;
                                the index sees every tier

The trace is scaled as bench-kv scales it for this model (benchmarks/kv/trace_scale.py): a trace
hash id (512 tokens) becomes one 16-token block, so a prompt is input_length / 32 tokens, at most
512; the output is min(output_length, 16); arrivals keep the trace's times (time_scale divides
them). Each node is one replica of the profiled model with the worker's default engine limits
(a 256 MiB KV pool); tiers are sized in multiples of that pool. Hits are the engine's own
accounting, as a share of the prompt blocks the engine looks up (each prompt's full blocks but
its last token's), next to what an infinite cache of every earlier prompt would serve.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from benchmarks.kv.trace_scale import select_window
from strata.core.profile import load_profile
from strata.core.stats import percentile
from strata.eval.traces import MOONCAKE_BLOCK_TOKENS, TraceRequest, read_mooncake
from strata.eval.workload import Scaling, Window
from strata.kvtier.hashing import HashKeys, chain_hashes
from strata.policy.model_sizes import model_memory_bytes
from strata.policy.placement import ModelDemand
from strata.sim.cluster import SimConfig, SimResult, Simulator, model_spec
from strata.sim.kv_tiers import KVTierSpec, TierCounters
from strata.sim.workload import SimRequest, sim_requests

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
PROFILE = ROOT / "benchmarks" / "profiles" / "smollm2-135m-instruct-cpu-2026-11-29.json"
BLOCK_TOKENS = 16  # a trace hash id becomes one engine block
MAX_PROMPT = 512  # 32 hash blocks, as bench-kv
MAX_OUTPUT = 16
NODE_BYTES = 8 << 30
# Load bandwidths, device pool to tier: host DRAM through shared memory with a checksum per
# block, and an NVMe read plus the same copy. Assumed, not measured (the fixed cost of the
# store's acquire round trip is not priced either).
HOST_BYTES_PER_S = 4e9
DISK_BYTES_PER_S = 1e9


@dataclass(slots=True, frozen=True)
class Way:
    label: str
    tiers: bool
    prefix_routing: bool


WAYS = (
    Way("no tiers, load routing", False, False),
    Way("no tiers, prefix routing", False, True),
    Way("tiers, prefix routing", True, True),
)


@dataclass(slots=True)
class WayResult:
    way: Way
    requests: int
    failed: int
    prompt_blocks: int  # blocks the engine looked up
    device_hit_blocks: int  # of them, found in the replica's device pool
    tier_hit_blocks: int  # loaded from the node's tiers
    ttft_p50_ms: float
    ttft_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    wall_s: float
    steps: int
    tiers: TierCounters  # summed over nodes (all zero without tiers)

    @property
    def device_ratio(self) -> float:
        return self.device_hit_blocks / self.prompt_blocks if self.prompt_blocks else 0.0

    @property
    def tier_ratio(self) -> float:
        return self.tier_hit_blocks / self.prompt_blocks if self.prompt_blocks else 0.0


@dataclass(slots=True)
class KVTiersBench:
    trace: str
    window: tuple[int, int]  # first request's position in the trace, requests
    span_s: float  # arrivals' span after scaling
    nodes: int
    model: str
    device_blocks: int  # per replica
    block_bytes: int
    tiers: KVTierSpec
    prompt_blocks: int
    bound_blocks: int  # what an infinite cache of earlier prompts would serve
    ways: list[WayResult]
    wall_s: float

    def describe(self) -> str:
        """A markdown section: setup, one table row per way, the tiers' own counters."""
        t = self.tiers
        mib = self.block_bytes / 2**20
        start, count = self.window
        lines = [
            "## KV tiers and prefix routing (simulator)",
            "",
            f"`{Path(self.trace).name}`, requests {start} to {start + count - 1} ({count}, "
            f"arrivals over {self.span_s:.0f} s), scaled as bench-kv scales it (a hash id is "
            f"one {BLOCK_TOKENS}-token block, prompts at most {MAX_PROMPT} tokens, outputs at "
            f"most {MAX_OUTPUT}); {self.nodes} simulated nodes, one `{self.model}` replica each "
            f"(CPU profile), device pool {self.device_blocks} blocks of {mib:.2f} MiB. "
            f"Tiers: host {t.host_blocks} blocks at {t.host_bytes_per_s / 1e9:g} GB/s, disk "
            f"{t.disk_blocks} blocks at {t.disk_bytes_per_s / 1e9:g} GB/s (assumed "
            f"bandwidths; a load costs bytes over bandwidth), policy `{t.policy}`, watermarks "
            f"{t.high_watermark:g}/{t.low_watermark:g}. Prompt blocks looked up: "
            f"{self.prompt_blocks:,}; an infinite cache of every earlier prompt would serve "
            f"{self.bound_blocks / self.prompt_blocks:.1%} of them (the bound).",
            "",
            "| way | device hits | tier hits | block-hit ratio | TTFT ms P50 / P99 | "
            "E2E ms P50 / P99 | failed | wall s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for w in self.ways:
            lines.append(
                f"| {w.way.label} | {w.device_ratio:.1%} | {w.tier_ratio:.1%} | "
                f"{w.device_ratio + w.tier_ratio:.1%} | {w.ttft_p50_ms:.0f} / "
                f"{w.ttft_p99_ms:.0f} | {w.e2e_p50_ms:.0f} / {w.e2e_p99_ms:.0f} | "
                f"{w.failed} | {w.wall_s:.1f} |"
            )
        tiered = [w for w in self.ways if w.way.tiers]
        for w in tiered:
            c = w.tiers
            lines += [
                "",
                f"{w.way.label}: {c.offloaded:,} evicted blocks written to host "
                f"({c.duplicates:,} already there, {c.refused:,} refused), "
                f"{c.demotions:,} demoted to disk, {c.host_drops + c.disk_drops:,} "
                f"dropped from nodes; loads {c.loaded_host:,} blocks from host and "
                f"{c.loaded_disk:,} from disk, {c.declined} prefixes recomputed by the "
                f"engine's cost choice.",
            ]
        lines += ["", f"Simulated in {self.wall_s:.1f} s of wall time in all.", ""]
        return "\n".join(lines)


def mooncake_requests(
    window: list[TraceRequest], model: str, time_scale: float = 1.0
) -> list[SimRequest]:
    """The window (arrival order) as simulator requests: prompts scaled to one block per hash
    id, outputs capped, not scaled (bench-kv's scaling), arrivals from the window's first."""
    t0 = window[0].arrival_s
    shifted = [replace(r, arrival_s=r.arrival_s - t0) for r in window]
    scaling = Scaling(
        time_scale=time_scale,
        length_scale=MOONCAKE_BLOCK_TOKENS / BLOCK_TOKENS,
        max_prompt=MAX_PROMPT,
        max_output=MAX_OUTPUT,
    )
    requests = sim_requests(shifted, scaling, Window(), model)
    ordered = sorted(shifted, key=lambda r: r.arrival_s)
    return [
        replace(q, output_tokens=min(r.output_tokens, MAX_OUTPUT))
        for q, r in zip(requests, ordered)
    ]


def bound_blocks(requests: list[SimRequest]) -> tuple[int, int]:
    """(prompt blocks looked up, of them in some earlier prompt's full blocks)."""
    seen: set[int] = set()
    looked = bound = 0
    for req in sorted(requests, key=lambda r: r.arrival_s):
        wanted = req.prefix_hashes(BLOCK_TOKENS)
        looked += len(wanted)
        for h in wanted:
            if h not in seen:
                break
            bound += 1
        seen.update(
            chain_hashes(
                req.prompt_ids(), BLOCK_TOKENS, HashKeys.for_request(req.model, req.tenant, False)
            )
        )
    return looked, bound


def run_kv_tiers(
    trace_path: str | Path = TRACE,
    profile_path: str | Path = PROFILE,
    nodes: int = 8,
    requests: int | None = None,
    start: int | None = None,
    time_scale: float = 1.0,
    host_pools: int = 4,
    disk_pools: int = 16,
    host_bytes_per_s: float = HOST_BYTES_PER_S,
    disk_bytes_per_s: float = DISK_BYTES_PER_S,
    policy: str = "heat",
    seed: int = 0,
) -> KVTiersBench:
    """The three ways on one window of the trace: `requests` from `start` (None: the last
    ones; all of the trace by default); tiers of host_pools and disk_pools times a replica's
    device pool per node."""
    began = time.perf_counter()
    trace = read_mooncake(trace_path).requests
    count = requests or len(trace)
    first = start if start is not None else max(0, len(trace) - count)
    window = select_window(trace, count, first)
    profile = load_profile(profile_path)
    memory = model_memory_bytes(profile.model) or NODE_BYTES // 2
    spec = model_spec(profile, memory)
    reqs = mooncake_requests(window, profile.model, time_scale)
    looked, bound = bound_blocks(reqs)
    device = spec.limits.num_blocks
    tiers = KVTierSpec(
        host_blocks=host_pools * device,
        host_bytes_per_s=host_bytes_per_s,
        disk_blocks=disk_pools * device,
        disk_bytes_per_s=disk_bytes_per_s,
        policy=policy,
    )
    results = []
    for way in WAYS:
        sim = Simulator(
            [(f"node-{i:02d}", max(NODE_BYTES, 2 * memory)) for i in range(nodes)],
            [spec],
            lambda now: [ModelDemand(profile.model, memory, nodes)],
            SimConfig(
                sample_s=30.0,
                seed=seed,
                kv_tiers=tiers if way.tiers else None,
                prefix_routing=way.prefix_routing,
            ),
        )
        started = time.perf_counter()
        result = sim.run(reqs)
        wall = time.perf_counter() - started
        counters = TierCounters()
        for node in sim.nodes.values():
            if node.kv is not None:
                for f in fields(TierCounters):
                    setattr(
                        counters,
                        f.name,
                        getattr(counters, f.name) + getattr(node.kv.counters, f.name),
                    )
        results.append(_figures(way, result, looked, wall, counters))
    return KVTiersBench(
        trace=str(trace_path),
        window=(first, len(window)),
        span_s=reqs[-1].arrival_s,
        nodes=nodes,
        model=profile.model,
        device_blocks=device,
        block_bytes=spec.kv_block_bytes,
        tiers=tiers,
        prompt_blocks=looked,
        bound_blocks=bound,
        ways=results,
        wall_s=time.perf_counter() - began,
    )


def _figures(
    way: Way, result: SimResult, looked: int, wall: float, counters: TierCounters
) -> WayResult:
    ok = [r for r in result.rows if not r.error_code]
    last = {}
    for s in result.samples:  # cumulative counters: each node's last sample has them all
        last[s.node_id] = s
    device = sum(s.prefix_hit_tokens for s in last.values()) // BLOCK_TOKENS
    tier = sum(s.tier_hit_tokens for s in last.values()) // BLOCK_TOKENS
    ttft = [r.ttft_ms for r in ok]
    e2e = [r.e2e_ms for r in ok]
    return WayResult(
        way=way,
        requests=len(result.rows),
        failed=len(result.rows) - len(ok),
        prompt_blocks=looked,
        device_hit_blocks=device,
        tier_hit_blocks=tier,
        ttft_p50_ms=percentile(ttft, 50),
        ttft_p99_ms=percentile(ttft, 99),
        e2e_p50_ms=percentile(e2e, 50),
        e2e_p99_ms=percentile(e2e, 99),
        wall_s=wall,
        steps=result.steps,
        tiers=counters,
    )
