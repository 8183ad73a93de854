"""`strata report`: the layered evaluation report (request, node and cluster layers) of one run
or of every request, in the terminal, as an HTML page with plots and as JSON; two runs side by
side; the stored runs.

    strata report                          every request the collector stored
    strata report --run 3 --html run3.html --json run3.json
    strata report --compare 3 4            run 4's figures next to run 3's, with the change
    strata report --compare 3 sim.json     a stored run next to a report file (`--json`, or a
                                           simulated run's report from strata.sim)
    strata report --runs                   the runs, newest last
    strata report --admin ...              every tenant, node and cluster layers included

Reports come through the gateway and are scoped to the key: a tenant key (the default, as for
`generate`) sees its own requests and runs; the admin key (`--admin`) sees every tenant and the
node and cluster layers. A collector that predates layered reports answers with its per-tenant
table, printed as before.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import types
import typing

from strata.client import settings
from strata.client.format import format_report, table
from strata.client.metrics import AsyncMetricsClient
from strata.eval.html_report import render
from strata.eval.report_codec import from_report
from strata.eval.report_text import compare_text, report_text, utc
from strata.eval.report_types import LayeredReport
from strata.v1 import metrics_pb2

REPORT_TIMEOUT_S = 30.0
EXIT_ERROR = 2


def _run_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"a run id is a positive integer (see `strata report --runs`), got {text!r}"
        )
    return value


def _report_ref(text: str) -> int | str:
    """A --compare operand: a stored run's id, or the path of a JSON report file."""
    if text.endswith(".json") or os.path.sep in text or os.path.exists(text):
        return text
    return _run_id(text)


def _decode(tp, value):
    """A value of type `tp` from its plain JSON form (dataclasses.asdict's output)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(inner[0], value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_decode(item, v) for v in value]
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(
            **{
                f.name: _decode(hints[f.name], value[f.name])
                for f in dataclasses.fields(tp)
                if f.name in value
            }
        )
    return value


def load_report_file(path: str) -> LayeredReport:
    """A layered report from the JSON document `strata report --json` (or the simulator)
    wrote; ValueError names the file and what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as err:
        raise ValueError(f"cannot read report file {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON ({err.msg} at line {err.lineno})") from None
    try:
        return _decode(LayeredReport, doc)
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(
            f"{path} is not a layered report as `strata report --json` writes "
            f"it ({type(err).__name__}: {err})"
        ) from None


def add_report_arguments(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("--tenant", default="", help="one tenant's requests (default: all)")
    rep.add_argument(
        "--run",
        type=_run_id,
        default=0,
        metavar="ID",
        help="one evaluation run's requests and its window's node samples",
    )
    rep.add_argument("--html", metavar="PATH", help="also write the report as an HTML page")
    rep.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    rep.add_argument(
        "--compare",
        type=_report_ref,
        nargs=2,
        metavar=("A", "B"),
        help="print B's figures next to A's; each is a run id or a JSON report "
        "file (from --json or a simulated run)",
    )
    rep.add_argument("--runs", action="store_true", help="list the stored evaluation runs")
    rep.add_argument(
        "--admin",
        action="store_true",
        help="with the admin key: every tenant, and the node and cluster layers "
        "(default: the API key's own tenant)",
    )


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def format_runs(runs: list[metrics_pb2.RunInfo]) -> str:
    if not runs:
        return "no runs stored (`strata replay` opens one per replay)"
    rows = []
    for r in runs:
        end = r.finished_unix_ms
        rows.append(
            [
                str(r.run_id),
                r.name,
                r.kind,
                utc(r.started_unix_ms),
                f"{(end - r.started_unix_ms) / 1000:.1f}" if end else "running",
            ]
        )
    return table(["run", "name", "kind", "started", "seconds"], rows)


def metrics_client(args: argparse.Namespace) -> AsyncMetricsClient:
    """The Metrics API with the caller's key: the admin key with --admin, else the API key."""
    key = settings.admin_key() if getattr(args, "admin", False) else settings.api_key()
    return AsyncMetricsClient(
        args.metrics, key, getattr(args, "tls_ca", None), getattr(args, "gateway", None)
    )


async def run_report(args: argparse.Namespace) -> int:
    if args.compare and (args.run or args.html or args.json or args.runs):
        print(
            "error: --compare takes two run ids or report files and prints a table; ask for "
            "--run, --html or --json in a separate call",
            file=sys.stderr,
        )
        return EXIT_ERROR
    files: dict[str, LayeredReport] = {}
    for ref in args.compare or ():
        if isinstance(ref, str):
            try:
                files[ref] = load_report_file(ref)
            except ValueError as err:
                print(f"error: {err}", file=sys.stderr)
                return EXIT_ERROR
    if args.compare and all(isinstance(ref, str) for ref in args.compare):
        a, b = args.compare
        print(compare_text(files[a], files[b], a, b))
        return 0
    async with metrics_client(args) as client:
        if args.runs:
            print(format_runs(await client.runs(timeout=REPORT_TIMEOUT_S)))
            return 0
        if args.compare:
            replies = [
                await client.report(args.tenant, run_id=ref, timeout=REPORT_TIMEOUT_S)
                for ref in args.compare
                if not isinstance(ref, str)
            ]
        else:
            replies = [await client.report(args.tenant, run_id=args.run, timeout=REPORT_TIMEOUT_S)]
    layered = [from_report(r) for r in replies]
    reports = [r for r in layered if r is not None]
    if len(reports) < len(layered):
        if args.compare or args.html or args.json:
            print(
                "error: this metrics collector sends per-tenant tables only, not layered "
                "reports; upgrade it to compare runs or write HTML and JSON",
                file=sys.stderr,
            )
            return EXIT_ERROR
        print(format_report(replies[0]))
        return 0
    if args.compare:
        stored = iter(reports)
        a, b = (files[ref] if isinstance(ref, str) else next(stored) for ref in args.compare)
        print(compare_text(a, b, str(args.compare[0]), str(args.compare[1])))
        return 0
    report = reports[0]
    print(report_text(report))
    if args.json:
        _write(args.json, json.dumps(report.to_json(), indent=1, sort_keys=True) + "\n")
        print(f"json report: {args.json}")
    if args.html:
        title = (
            f"Strata run {report.run.run_id}: {report.run.name}"
            if report.run
            else "Strata evaluation report"
        )
        _write(args.html, render(report, title))
        print(f"html report: {args.html}")
    return 0
