"""`strata profile`: measure the engine's step costs on this machine for the cluster simulator.

    strata profile --model dummy-tiny --out profile.json
    strata profile --model smollm2-135m-instruct --threads 1 --out smollm2-cpu.json

Loads the model, runs the real LLMEngine over a grid of prefill, decode and mixed step shapes
(strata.engine.profiler), fits the simulator's cost line and writes it, with the machine, the
raw measurements and the fit's error, as JSON. Exit 0 on success, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from strata.core import defaults

EXIT_ERROR = 2


def add_profile_parser(sub: argparse._SubParsersAction) -> None:
    """Register `profile` on the `strata` command's subparsers."""
    p = sub.add_parser(
        "profile",
        help="measure engine step costs into a simulator profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default=defaults.DEFAULT_MODEL,
        help=f"model name or path (default {defaults.DEFAULT_MODEL})",
    )
    p.add_argument("--out", required=True, help="where to write the profile JSON")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for the engine (default 1, as in the stack's tests)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "float16", "bfloat16"),
        help="the engine's dtype (default auto: what a worker computes in, STRATA_DTYPE's default)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (a GPU profile simulates it)")
    p.add_argument("--max-batched-tokens", type=int, default=2048)
    p.add_argument("--max-seqs", type=int, default=32)
    p.add_argument(
        "--kv-blocks",
        type=int,
        default=0,
        help="KV blocks for profiling (default: enough for the grid)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smaller grid (about a third of the shapes) for slow models",
    )
    p.add_argument(
        "--colocate",
        type=int,
        default=0,
        metavar="N",
        help="also measure N engines decoding together on the device against one "
        "alone (strata.engine.colocation); the simulator prices co-located "
        "replicas with it (default 0: not measured, engines take turns)",
    )
    p.add_argument(
        "--colocate-batches",
        default="1,8,32",
        help="decode batch sizes of the co-location measurement (default 1,8,32)",
    )
    p.add_argument(
        "--colocate-seconds",
        type=float,
        default=4.0,
        help="seconds each co-location phase steps (default 4)",
    )
    p.set_defaults(handler=run_profile)


async def run_profile(args: argparse.Namespace) -> int:
    # Imported here: torch takes seconds to import and no other subcommand needs it.
    try:
        from strata.engine.colocation import ColocationPlan, measure_colocation
        from strata.engine.engine import EngineConfig
        from strata.engine.profiler import QUICK_GRID, ProfileGrid, profile_engine
        from strata.engine.registry import load_model
    except ModuleNotFoundError as err:
        print(
            f"strata profile: measures an engine on this machine and needs {err.name}, "
            f"which the client install leaves out: pip install 'strata[server]'",
            file=sys.stderr,
        )
        return 2

    if args.threads < 1:
        print(f"error: --threads must be at least 1, got {args.threads}", file=sys.stderr)
        return EXIT_ERROR
    grid = QUICK_GRID if args.quick else ProfileGrid()
    # Room for the widest decode shape (batch x context) plus one mixed step besides it.
    need = max(grid.decode_batches) * (max(grid.decode_contexts) + grid.decode_steps + 16)
    blocks = args.kv_blocks or -(-need // 16) + 256
    try:
        together = None
        if args.colocate:
            together = ColocationPlan(
                model=args.model,
                device=args.device,
                dtype=args.dtype,
                threads=args.threads,
                engines=args.colocate,
                seconds=args.colocate_seconds,
                batches=tuple(int(b) for b in args.colocate_batches.split(",") if b.strip()),
            )
        config = EngineConfig(
            num_blocks=blocks,
            max_batched_tokens=args.max_batched_tokens,
            max_seqs=args.max_seqs,
            device=args.device,
            dtype=args.dtype,
        )
        loaded = load_model(args.model)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    started = time.perf_counter()
    profile = profile_engine(loaded, config, args.threads, grid, progress=print)
    if together is not None:
        del loaded  # the co-located engines load their own copies
        profile.colocation = measure_colocation(together, progress=print)
        print(f"co-location share: {profile.colocation_share:.3f} of a neighbour's step")
    profile.save(args.out)
    c, e = profile.costs, profile.fit_error
    print(
        f"fit: {c.step_s * 1e3:.3f} ms/step + {c.token_s * 1e6:.2f} us/token + "
        f"{c.sample_s * 1e6:.2f} us/sampled + {c.prefill_attend_s * 1e9:.3f} ns/prefill key + "
        f"{c.decode_attend_s * 1e9:.3f} ns/decode key; error mean "
        f"{e.mean_abs_rel * 100:.1f}%, max {e.max_abs_rel * 100:.1f}% over {e.points} shapes"
    )
    print(
        f"profile of {profile.model} ({profile.dtype}, {args.threads} threads) written to "
        f"{args.out} in {time.perf_counter() - started:.0f} s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m strata.client.profile_cli ARGS`: `strata profile ARGS` without the rest of
    the command line's imports (a GPU machine with torch but no OpenTelemetry or SQLAlchemy)."""
    parser = argparse.ArgumentParser(prog="strata")
    add_profile_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["profile", *(sys.argv[1:] if argv is None else argv)])
    return asyncio.run(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
