"""What `strata tenants` prints: readable tables of tenants and SLA classes, and the JSON for
machines (rate limit null = the gateway's default, a target null = not judged).

Pure functions over the Admin API's replies, so the exact output is tested without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from strata.core.sla import BEST_EFFORT
from strata.v1 import admin_pb2

NO_TARGET = "-"


def tenant_dict(r: admin_pb2.TenantRecord) -> dict[str, object]:
    return {
        "name": r.name,
        "sla_class": r.sla_class,
        "weight": r.weight,
        "guaranteed_share": r.guaranteed_share,
        "burst_share": r.burst_share,
        "rate_limit_rps": r.rate_limit_rps or None,
        "created_unix_ms": r.created_unix_ms,
        "active_keys": r.active_keys,
    }


def class_dict(c: admin_pb2.SlaClassRecord) -> dict[str, object]:
    return {
        "name": c.name,
        "priority": c.priority,
        "ttft_ms": c.ttft_ms if c.HasField("ttft_ms") else None,
        "tpot_ms": c.tpot_ms if c.HasField("tpot_ms") else None,
    }


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int) -> str:
    """Columns two spaces apart: the first `text_columns` left-aligned, the numbers right."""
    widths = [max(map(len, column)) for column in zip(headers, *rows, strict=True)]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i < text_columns else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in (headers, *rows)
    )


def _rate(r: admin_pb2.TenantRecord) -> str:
    return f"{r.rate_limit_rps:g}" if r.rate_limit_rps else "default"


def _created(unix_ms: int) -> str:
    return datetime.fromtimestamp(unix_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_tenant(r: admin_pb2.TenantRecord) -> str:
    rows = [
        ("tenant", r.name),
        ("sla class", r.sla_class),
        ("weight", f"{r.weight:g}"),
        ("guaranteed share", f"{r.guaranteed_share:g}"),
        ("burst share", f"{r.burst_share:g}"),
        ("rate limit (req/s)", _rate(r)),
        ("active keys", str(r.active_keys)),
        ("created", _created(r.created_unix_ms)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def format_tenants(tenants) -> str:
    if not tenants:
        return "no tenants (create one with `strata tenants create NAME`)"
    return _table(
        ["tenant", "class", "weight", "guaranteed", "burst", "rate_rps", "keys"],
        [
            [
                t.name,
                t.sla_class,
                f"{t.weight:g}",
                f"{t.guaranteed_share:g}",
                f"{t.burst_share:g}",
                _rate(t),
                str(t.active_keys),
            ]
            for t in tenants
        ],
        2,
    )


def _target_text(c: admin_pb2.SlaClassRecord, field: str) -> str:
    return f"{getattr(c, field):g}" if c.HasField(field) else NO_TARGET


def format_class_table(classes) -> str:
    return _table(
        ["class", "priority", "ttft_ms", "tpot_ms"],
        [
            [c.name, str(c.priority), _target_text(c, "ttft_ms"), _target_text(c, "tpot_ms")]
            for c in classes
        ],
        1,
    )


def format_classes(reply: admin_pb2.ListSlaClassesResponse) -> str:
    return (
        f"{format_class_table(reply.classes)}\n"
        f"targets are P99 in ms ({NO_TARGET}: not judged; both {NO_TARGET}: {BEST_EFFORT}); "
        f"default class: {reply.default_class}"
    )
