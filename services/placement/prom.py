"""The placement planner's Prometheus metrics:

strata_placement_plan_version            the version of the plan in force (0: none yet)
strata_placement_assignments{model}      replicas the plan assigns
strata_placement_migrations_running
strata_placement_migrations_total{outcome}    started | abandoned
strata_placement_cordoned_nodes
strata_placement_lease_held              1 while this planner holds the lease (applies plans)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import Metric

from services.placement.planner import Planner
from strata.telemetry.prometheus import counter, gauge


def planner_families(planner: Planner) -> Iterable[Metric]:
    latest = planner.latest
    held = planner.lease is None or planner.lease.held
    yield gauge("strata_placement_lease_held", "1 while this planner applies plans", (),
                [((), 1 if held else 0)])  # fmt: skip
    yield gauge("strata_placement_plan_version", "The plan in force", (),
                [((), latest.version if latest is not None else 0)])  # fmt: skip
    per_model = Counter(a.model for a in latest.plan.assignments) if latest is not None else {}
    yield gauge("strata_placement_assignments", "Replicas the plan assigns", ("model",),
                (((m,), n) for m, n in sorted(per_model.items())))  # fmt: skip
    book = planner.migrations.book
    yield gauge("strata_placement_migrations_running", "Migrations in flight", (),
                [((), len(book.running))])  # fmt: skip
    yield counter(
        "strata_placement_migrations",
        "Make-before-break migrations started, and of them abandoned",
        ("outcome",),
        [(("started",), book.started_total), (("abandoned",), book.abandoned_total)],
    )
    yield gauge("strata_placement_cordoned_nodes", "Nodes cordoned", (),
                [((), len(latest.cordoned) if latest is not None else 0)])  # fmt: skip
