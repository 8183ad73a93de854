"""`strata replay`: replay a trace file or a synthetic workload through the gateway, open loop.

    strata replay --trace conv.csv --format azure --model dummy-small \\
        --time-scale 10 --length-scale 4 --max-duration 300
    strata replay --format gamma --rate 5 --cv 3 --duration 60 --model smollm2-135m-instruct
    strata replay --format mix --mix alice:2:interactive,bob:0.5:batch:3 --duration 60 \\
        --tenants alice=KEY_A,bob=KEY_B --model dummy-small

Prints the run id and the client's summary table; requests.jsonl and summary.json land in
--out/run-<id>/. Exit 0 when at least one request succeeded, 1 when none did, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import cast

from strata.client import settings
from strata.client.replay import (
    DEFAULT_REQUEST_TIMEOUT_S,
    TARGETS,
    ReplayConfig,
    ReplayError,
    replay,
)
from strata.core import defaults
from strata.eval import synthetic
from strata.eval.client_metrics import format_summary
from strata.eval.traces import FORMATS as TRACE_FORMATS
from strata.eval.traces import TraceRequest, read_trace
from strata.eval.workload import (
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MAX_PROMPT,
    ByteText,
    PromptSynth,
    Scaling,
    TenantKey,
    TenantMapper,
    TokenText,
    Window,
    WordText,
    WorkloadRequest,
    build_workload,
    parse_tenants,
    text_for_model,
)

SYNTHETIC_FORMATS = ("poisson", "gamma", "diurnal", "mix")
EXIT_NONE_SUCCEEDED = 1
EXIT_ERROR = 2  # bad arguments, or the metrics service could not open or close the run


def add_replay_parser(sub: argparse._SubParsersAction) -> None:
    """Register `replay` on the `strata` command's subparsers."""
    p = sub.add_parser(
        "replay",
        help="replay a trace or synthetic load through the gateway",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trace", help="trace file (for --format azure, burstgpt, mooncake)")
    p.add_argument("--format", required=True, choices=(*TRACE_FORMATS, *SYNTHETIC_FORMATS))
    p.add_argument("--model", required=True, help="model name to send every request to")
    syn = p.add_argument_group("synthetic load")
    syn.add_argument("--rate", type=float, help="requests per second (poisson, gamma, diurnal)")
    syn.add_argument(
        "--cv",
        type=float,
        default=1.0,
        help="gamma: coefficient of variation of gaps (default 1 = Poisson)",
    )
    syn.add_argument(
        "--duration", type=float, help="seconds of synthetic load (default: --max-duration)"
    )
    syn.add_argument("--period", type=float, default=60.0, help="diurnal: period in seconds")
    syn.add_argument(
        "--amplitude",
        type=float,
        default=0.5,
        help="diurnal: rate swing as a fraction of --rate (0..1)",
    )
    syn.add_argument("--mix", help="mix: tenant:rate:sla_class[:cv[:prompt[:output]]],...")
    syn.add_argument("--prompt-tokens", type=int, default=256, help="synthetic prompt length")
    syn.add_argument("--output-tokens", type=int, default=64, help="synthetic output length")
    syn.add_argument(
        "--length-range",
        type=float,
        default=0.0,
        help="lengths uniform in n*(1-R)..n*(1+R) (default 0: fixed)",
    )
    syn.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of synthetic arrivals and sizes, and of weighted tenant mapping",
    )
    sc = p.add_argument_group("scaling and window")
    sc.add_argument(
        "--time-scale", type=float, default=1.0, help="speed-up: send at trace time / X (default 1)"
    )
    sc.add_argument(
        "--length-scale",
        type=float,
        default=1.0,
        help="divide trace lengths (and Mooncake's 512-token blocks) by Y",
    )
    sc.add_argument("--max-prompt", type=int, default=DEFAULT_MAX_PROMPT)
    sc.add_argument("--max-output", type=int, default=DEFAULT_MAX_OUTPUT)
    sc.add_argument("--max-requests", type=int, help="send at most N requests")
    sc.add_argument(
        "--max-duration",
        type=float,
        help="send requests scheduled within the first S seconds (scaled)",
    )
    p.add_argument(
        "--tenants",
        help="API keys: key1,key2 (round-robin) or label=key:weight,... "
        "(weighted; a label matching a trace tenant gets its "
        "requests); default: the demo key",
    )
    p.add_argument(
        "--text",
        choices=("auto", "bytes", "words"),
        default="auto",
        help="prompt text: one letter per token (dummy models) or one word per token "
        "(BPE models); auto picks by model name",
    )
    p.add_argument(
        "--prompt-seed",
        type=int,
        help="seed of prompt contents (default: fresh, so no run hits the prefix "
        "cache left by an earlier one; recorded in the run's params)",
    )
    p.add_argument(
        "--prefix-public",
        action="store_true",
        help="let tenants share cached prefixes (Mooncake across tenants)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help=f"per-request deadline in seconds (default {DEFAULT_REQUEST_TIMEOUT_S:.0f})",
    )
    p.add_argument(
        "--target",
        choices=TARGETS,
        default="grpc",
        help="grpc: Strata's gateway (the run's layered report too); openai: any "
        "OpenAI-compatible server at --url (vLLM, SGLang, llama.cpp, Strata's HTTP port), "
        "measured by the same client; a run is opened only when --metrics is given",
    )
    p.add_argument("--url", default="", help="openai target: the server's base URL")
    p.add_argument("--out", help="results directory (default: <data dir>/replays)")
    p.add_argument("--name", default="", help="run name shown in reports")
    p.add_argument(
        "--admin",
        action="store_true",
        help="open the run with the admin key, so that every tenant's requests in "
        "it show in its report (default: the first tenant's key owns the run)",
    )
    p.set_defaults(handler=run_replay)


async def run_replay(args: argparse.Namespace) -> int:
    try:
        workload, config = _prepare(args)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    tenants = cast(list[str], config.params["tenants"])  # _prepare's labels
    print(
        f"replaying {len(workload)} requests over {workload[-1].send_at_s:.1f} s to "
        f"{args.model} (tenants: {', '.join(tenants)})",
        file=sys.stderr,
    )
    try:
        result = await replay(workload, config, progress_stream=sys.stderr)
    except ReplayError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    label = f"run {result.run_id}" if result.run_id else f"{args.target} target {args.url}"
    print(label + (f" ({args.name})" if args.name else ""))
    print(format_summary(result.summary))
    print(f"results     {result.run_dir}")
    return 0 if result.summary.succeeded > 0 else EXIT_NONE_SUCCEEDED


def _prepare(args: argparse.Namespace) -> tuple[list[WorkloadRequest], ReplayConfig]:
    """The workload and the replay's settings; ValueError or OSError says what is wrong."""
    requests, skipped = _requests(args)
    keys, weighted = (
        parse_tenants(args.tenants)
        if args.tenants
        else ([TenantKey(defaults.DEMO_TENANT, settings.api_key())], False)
    )
    scaling = Scaling(
        time_scale=args.time_scale,
        length_scale=args.length_scale,
        max_prompt=args.max_prompt,
        max_output=args.max_output,
    )
    prompt_seed = args.prompt_seed if args.prompt_seed is not None else random.randrange(2**32)
    texts: dict[str, TokenText] = {"bytes": ByteText(), "words": WordText()}
    text = texts.get(args.text) or text_for_model(args.model)
    workload = build_workload(
        requests,
        scaling,
        Window(args.max_requests, args.max_duration),
        TenantMapper(keys, weighted=weighted, rng=random.Random(args.seed)),
        PromptSynth(text, scaling.block_tokens, prompt_seed),
    )
    if not workload:
        raise ValueError("the trace and the window leave no request to send")
    params = {
        "trace": os.path.abspath(args.trace) if args.trace else "",
        "format": args.format,
        "trace_requests": len(requests),
        "skipped_failures": skipped,
        "requests": len(workload),
        "span_s": workload[-1].send_at_s,
        "model": args.model,
        "time_scale": args.time_scale,
        "length_scale": args.length_scale,
        "max_prompt": args.max_prompt,
        "max_output": args.max_output,
        "block_tokens": scaling.block_tokens,
        "max_requests": args.max_requests,
        "max_duration_s": args.max_duration,
        "rate": args.rate,
        "cv": args.cv,
        "duration_s": args.duration,
        "mix": args.mix,
        "seed": args.seed,
        "prompt_seed": prompt_seed,
        "text": text.name,
        "tenants": [k.label for k in keys],
        "tenant_mapping": "weighted" if weighted else "round-robin",
        "timeout_s": args.timeout,
        "prefix_public": args.prefix_public,
        "ignore_eos": True,
        "target": args.target,
        "url": args.url,
    }
    config = ReplayConfig(
        model=args.model,
        gateway=settings.gateway_address(args.gateway),
        metrics=(
            settings.metrics_address(args.metrics, gateway=args.gateway)
            if args.target == "grpc" or args.metrics
            else ""
        ),
        target=args.target,
        url=args.url,
        out_dir=args.out or os.path.join(os.path.dirname(settings.demo_key_path()), "replays"),
        name=args.name,
        params=params,
        request_timeout_s=args.timeout,
        prefix_public=args.prefix_public,
        run_key=settings.admin_key() if args.admin else keys[0].api_key,
        tls_ca=settings.tls_ca(args.tls_ca),
    )
    return workload, config


def _requests(args: argparse.Namespace) -> tuple[list[TraceRequest], int]:
    """The trace's requests (and its skipped failure rows), or the synthetic ones."""
    if args.format in TRACE_FORMATS:
        if not args.trace:
            raise ValueError(f"--format {args.format} reads a file: give --trace FILE")
        trace = read_trace(args.trace, args.format)
        return trace.requests, trace.skipped_failures
    if args.trace:
        raise ValueError(
            f"--format {args.format} is synthetic and reads no file; drop --trace "
            f"or pick one of {', '.join(TRACE_FORMATS)}"
        )
    duration = args.duration if args.duration is not None else args.max_duration
    if duration is None and args.max_requests is None:
        raise ValueError(
            f"--format {args.format} needs --duration, --max-duration or "
            f"--max-requests: a synthetic load never ends by itself"
        )
    rng = random.Random(args.seed)
    bounds = {"count": args.max_requests, "duration_s": duration}
    if args.format == "mix":
        if not args.mix:
            raise ValueError(
                "--format mix needs --mix tenant:rate:sla_class[:cv[:prompt[:output]]],..."
            )
        return synthetic.tenant_mix(_parse_mix(args), rng, **bounds), 0
    if args.rate is None:
        raise ValueError(f"--format {args.format} needs --rate (requests per second)")
    if args.format == "poisson":
        arrivals = synthetic.poisson_arrivals(args.rate, rng, **bounds)
    elif args.format == "gamma":
        arrivals = synthetic.gamma_arrivals(args.rate, args.cv, rng, **bounds)
    else:
        arrivals = synthetic.diurnal_arrivals(args.rate, args.period, args.amplitude, rng, **bounds)
    return synthetic.requests_at(
        arrivals,
        _lengths(args.prompt_tokens, args.length_range),
        _lengths(args.output_tokens, args.length_range),
        rng,
    ), 0


def _lengths(tokens: int, spread: float) -> synthetic.LengthDist:
    if not 0.0 <= spread < 1.0:
        raise ValueError(f"--length-range must be in [0, 1), got {spread}")
    if spread == 0.0:
        return synthetic.Fixed(tokens)
    return synthetic.Uniform(max(1, round(tokens * (1 - spread))), round(tokens * (1 + spread)))


def _parse_mix(args: argparse.Namespace) -> list[synthetic.TenantTraffic]:
    loads = []
    for entry in args.mix.split(","):
        fields = entry.strip().split(":")
        if not 3 <= len(fields) <= 6:
            raise ValueError(
                f"--mix entry {entry!r} must be tenant:rate:sla_class[:cv[:prompt[:output]]]"
            )
        try:
            rate = float(fields[1])
            cv = float(fields[3]) if len(fields) > 3 else 1.0
            prompt = int(fields[4]) if len(fields) > 4 else args.prompt_tokens
            output = int(fields[5]) if len(fields) > 5 else args.output_tokens
        except ValueError:
            raise ValueError(
                f"--mix entry {entry!r}: rate and cv must be numbers, prompt and output integers"
            ) from None
        loads.append(
            synthetic.TenantTraffic(
                fields[0],
                rate,
                fields[2],
                _lengths(prompt, args.length_range),
                _lengths(output, args.length_range),
                cv=cv,
            )
        )
    return loads
