"""A simulated run's layered report, built by the same functions as a real run's.

The simulator emits the rows a real run stores (RequestRecord per request, NodeSampleRecord per
node and interval); strata.eval.layers turns them into the request, node and cluster layers, and
the JSON document is the one `strata report --json` writes, so `strata report --compare` puts a
simulated run beside a real one.
"""

from __future__ import annotations

import json
import os

from strata.core.records import RunRecord
from strata.eval.layers import LayerSettings, layered_report
from strata.eval.report_types import LayeredReport
from strata.sim.cluster import SimResult

SIM_RUN_KIND = "benchmark"


def sim_report(
    result: SimResult,
    epoch_unix_ms: int,
    name: str,
    params_json: str = "{}",
    settings: LayerSettings | None = None,
    tenant_classes: dict[str, str] | None = None,
) -> LayeredReport:
    """The layered report over the simulated window [0, result.end_s]."""
    start = epoch_unix_ms
    end = epoch_unix_ms + round(result.end_s * 1000)
    run = RunRecord(
        run_id=0,
        name=name,
        kind=SIM_RUN_KIND,
        started_unix_ms=start,
        finished_unix_ms=end,
        params_json=params_json,
        client_summary_json=None,
    )
    return layered_report(
        result.rows,
        result.samples,
        tenant_classes or {},
        start,
        end,
        settings or LayerSettings(),
        run=run,
    )


def write_report(report: LayeredReport, path: str | os.PathLike[str]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(report.to_json(), indent=1, sort_keys=True) + "\n")
