"""SLAs under overload: the real stack past its capacity (two-level vs FCFS without admission,
same run) and the simulator's 64-GPU pool with a tenant bursting to 10x (two-level vs a static
partition of the guaranteed shares).

    python -m benchmarks.overload [--models smollm2-135m-instruct,dummy-small] [--no-stack]
                                  [--no-sim] [--multiples 0.5,1,2,3] [--point-s 90]
                                  [--stack-from docs/benchmarks/overload.json]
                                  [--out docs/benchmarks/overload.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from benchmarks.common.targets import Verdict
from benchmarks.overload import sim_part
from benchmarks.overload.report import render
from benchmarks.overload.stack_sweep import SweepSettings, run_model, say
from benchmarks.overload.workload import load_trace
from strata.core.sla import SlaTable

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs/benchmarks/overload.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overload")
    p.add_argument("--models", default="smollm2-135m-instruct,dummy-small")
    p.add_argument("--multiples", default="0.5,1,2,3", help="offered load / capacity")
    p.add_argument("--point-s", type=float, default=90.0, help="shortest window of a point")
    p.add_argument("--min-admitted", type=int, default=100)
    p.add_argument("--capacity-s", type=float, default=45.0)
    p.add_argument("--no-stack", action="store_true")
    p.add_argument(
        "--stack-from",
        default="",
        help="take the real-stack part from this earlier report's .json instead of running it",
    )
    p.add_argument("--no-sim", action="store_true")
    p.add_argument("--sim-seeds", default="1,2")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--command", default="")
    args = p.parse_args(argv)
    settings = SweepSettings(
        multiples=tuple(float(x) for x in args.multiples.split(",")),
        min_point_s=args.point_s,
        min_admitted=args.min_admitted,
        capacity_s=args.capacity_s,
    )
    stack = []
    if args.stack_from:
        earlier = json.loads(Path(args.stack_from).read_text())
        stack, settings_data = earlier["stack"], earlier["settings"]
    elif not args.no_stack:
        trace = load_trace()
        with tempfile.TemporaryDirectory(prefix="strata-overload-") as tmp:
            for model in args.models.split(","):
                stack.append(run_model(model, trace, SlaTable(), settings, Path(tmp)))
    sim = None
    if not args.no_sim:
        seeds = tuple(int(x) for x in args.sim_seeds.split(","))
        sim = sim_part.run(sim_part.SimSettings(seeds=seeds), say)
    command = args.command or " ".join(["python -m benchmarks.overload", *sys.argv[1:]])
    if not args.stack_from:
        settings_data = asdict(settings)
    text, data = render(command, stack, sim, settings_data)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True))
    for v in data["targets"]["verdicts"]:
        print(Verdict(**v).line())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
