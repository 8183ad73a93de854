"""The load sweep: the same real trace, the same weights and the same open-loop client against
Strata's OpenAI endpoint (the whole stack, as `make run` starts it) and vLLM's OpenAI server, at
offered loads from light to past capacity.

    weights     the default model (SmolLM2-135M-Instruct's Q4_1 GGUF) widened once and written
                as one Hugging Face checkpoint with its tokenizer; both servers load that
                folder in its dtype, so they compute with the same numbers: bf16 where the CPU
                multiplies bf16 natively, float32 elsewhere (an AVX2-only CPU emulates bf16,
                several times slower than float32, on both servers alike)
    trace       the Azure conversation trace (2023), lengths / 8 (benchmarks.overload.workload),
                one tenant of the standard class; a point of rate r over w seconds sends the
                trace's first r x w requests with their arrivals scaled into the window
    loads       multiples of Strata's capacity, measured closed loop through its gateway first
                (benchmarks.overload.capacity); vLLM is offered the very same points
    client      strata.client.replay with the OpenAI target: streamed `/v1/completions`,
                `ignore_eos` (every request decodes its trace's output length on both), no
                retries (a 429 is final), a 60 s deadline per request
    goodput     requests per second of window that completed within the standard class's TTFT
                and TPOT targets (strata.core.sla)

Each server has the machine alone while it is measured (Strata first, then vLLM).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.common.supervised import SupervisedStack
from benchmarks.engine.hf_model import save_checkpoint
from benchmarks.isolation.stack_run import create_tenants
from benchmarks.isolation.workload import TenantSpec
from benchmarks.overload.capacity import measure_capacity
from benchmarks.overload.points import Latency, point_stats
from benchmarks.overload.stack_sweep import say
from benchmarks.overload.workload import load_trace, point_window_s, point_workload
from benchmarks.serving.vllm_server import VllmServer
from strata.client.replay import ReplayConfig, replay
from strata.core import defaults
from strata.core.sla import SlaTable
from strata.eval.traces import TraceRequest

CHECKPOINT = "smollm2-135m-instruct-{}"  # the folder (.format(dtype)); its path is the model's name
TENANTS = (TenantSpec("api", "standard", 1.0, weight=1.0, guaranteed_share=1.0, burst_share=1.0),)
MAX_MODEL_LEN = 2048
DTYPE_SUFFIX = {"bfloat16": "bf16", "float32": "f32"}


@dataclass(slots=True, frozen=True)
class SweepSettings:
    multiples: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)
    min_point_s: float = 45.0
    min_admitted: int = 60
    request_timeout_s: float = 60.0
    capacity_s: float = 45.0
    capacity_warmup_s: float = 10.0
    capacity_clients: int = 16
    pause_s: float = 5.0


def sweep_dtype() -> str:
    """The dtype both servers compute in: bf16 where this CPU multiplies it natively, else
    float32 (compute_dtype.native_bf16)."""
    from strata.engine.compute_dtype import native_bf16

    return "bfloat16" if native_bf16(torch.device("cpu")) else "float32"


def write_checkpoint(directory: Path, dtype: str) -> Path:
    """The default model as an HF checkpoint in `dtype` with its tokenizer, in
    directory/CHECKPOINT."""
    from transformers import AutoTokenizer

    from strata.engine.checkpoints import default_model_path
    from strata.engine.gguf_loader import load_gguf

    name = CHECKPOINT.format(DTYPE_SUFFIX[dtype])
    out = directory / name
    gguf = default_model_path()
    save_checkpoint(load_gguf(gguf, name=name, keep_quantized=False), out, getattr(torch, dtype))
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out)
    return out


@dataclass(slots=True, frozen=True)
class _Points:
    """What every server is offered: the same requests at the same rates."""

    model: str
    keys: dict[str, str]
    trace: Sequence[TraceRequest]
    rates: Sequence[float]
    capacity_rps: float
    settings: SweepSettings
    table: SlaTable

    def run(self, server: str, url: str, out_dir: Path) -> list[dict]:
        """Each rate as one open-loop replay against `server`'s OpenAI API at `url`."""
        settings = self.settings
        points = []
        for i, rate in enumerate(self.rates):
            time.sleep(settings.pause_s)
            window = point_window_s(
                rate, self.capacity_rps, settings.min_point_s, settings.min_admitted
            )
            workload, scale = point_workload(
                self.trace, rate, window, self.keys, self.model, 1000 + i, tenants=TENANTS
            )
            config = ReplayConfig(
                model=self.model,
                gateway="",
                metrics="",
                out_dir=str(out_dir),
                name=f"serving-{server}-{rate:.2f}rps",
                request_timeout_s=settings.request_timeout_s,
                target="openai",
                url=url,
            )
            t0 = time.perf_counter()
            result = asyncio.run(replay(workload, config))
            wall = time.perf_counter() - t0
            stats = point_stats(result.records, window, self.table)
            a = stats.all
            done = [r for r in result.records if r.ok]
            itl = Latency.of(gap for r in done for gap in r.itl_s)
            say(
                f"serving {server} {rate:.2f} req/s ({window:.0f} s): sent {a.sent}, refused "
                f"{a.refused}, failed {a.failed}, goodput {a.goodput_rps:.2f}/s, TTFT P99 "
                f"{a.ttft.p99 or 0:.0f} ms, wall {wall:.0f} s"
            )
            points.append(
                {
                    "rate": rate,
                    "window_s": window,
                    "time_scale": scale,
                    "requests": len(workload),
                    "not_sent": result.not_sent,
                    "output_tokens": sum(r.output_tokens for r in done),
                    "itl": asdict(itl),
                    "wall_s": wall,
                    "stats": asdict(stats),
                }
            )
        return points


def run_sweep(
    workdir: Path, peers: Sequence[str], settings: SweepSettings = SweepSettings()
) -> dict:
    """Strata, then each peer, on the same points; returns the results as plain data."""
    workdir.mkdir(parents=True, exist_ok=True)
    trace = load_trace()
    table = SlaTable()
    dtype = sweep_dtype()
    checkpoint = write_checkpoint(workdir, dtype)
    data_dir = workdir / "strata"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    model = str(checkpoint)
    memory = checkpoint / "model.safetensors"
    stack = SupervisedStack(
        data_dir,
        env={"STRATA_MODEL_MEMORY_BYTES": f"{checkpoint}={3 * memory.stat().st_size}"},
        model=model,
    )
    out: dict = {
        "model": checkpoint.name,
        "dtype": dtype,
        "settings": asdict(settings),
        "servers": {},
    }
    try:
        stack.start()
        stack.wait_whole()
        admin_key = (data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
        keys = asyncio.run(create_tenants(stack.gateway, admin_key, TENANTS))
        cap = measure_capacity(
            stack.gateway,
            keys[TENANTS[0].name],
            model,
            trace,
            settings.capacity_clients,
            settings.capacity_s,
            settings.capacity_warmup_s,
        )
        say(f"serving strata: capacity {cap.rps:.2f} requests/s ({cap.completed} completed)")
        if cap.completed == 0:
            raise RuntimeError(
                f"no request completed while measuring capacity ({cap.refused} refused, "
                f"{cap.failed} failed)"
            )
        rates = [m * cap.rps for m in settings.multiples]
        out["capacity"] = asdict(cap)
        out["rates"] = rates
        points = _Points(model, keys, trace, rates, cap.rps, settings, table)
        out["servers"]["strata"] = points.run("strata", stack.http_url, data_dir / "replays")
    except BaseException:
        say(stack.log())
        raise
    finally:
        stack.stop()
    for peer in peers:
        if peer != "vllm":
            raise SystemExit(f"bench-serving knows the peer vllm, not {peer!r}")
        server = VllmServer(checkpoint, model, workdir / "vllm.log", MAX_MODEL_LEN, dtype)
        started = time.perf_counter()
        try:
            server.start()
            say(f"serving vllm: up in {time.perf_counter() - started:.0f} s")
            out["servers"]["vllm"] = points.run("vllm", server.url, workdir / "vllm-replays")
        finally:
            server.stop()
    return out
