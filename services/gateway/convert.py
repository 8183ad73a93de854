"""Protobuf <-> library types for the gateway's Admin API: tenant records and settings, SLA
classes.

A zero in a TenantRecord means the field's default, in CreateTenant and UpdateTenant alike:
proto3 cannot tell an unset double from 0, and no setting is meaningful at 0 except the
guaranteed share, whose default is 0.
"""

from __future__ import annotations

from strata.core.sla import DEFAULT_CLASS, SlaClass
from strata.store.tenants import SETTINGS_FIELDS, TenantInfo, TenantSettings
from strata.v1 import admin_pb2


def settings_from_record(r: admin_pb2.TenantRecord) -> TenantSettings:
    return TenantSettings(
        sla_class=r.sla_class or DEFAULT_CLASS,
        weight=r.weight or 1.0,
        guaranteed_share=r.guaranteed_share,
        burst_share=r.burst_share or 1.0,
        rate_limit_rps=r.rate_limit_rps or None,
    )


def changes_from_update(request: admin_pb2.UpdateTenantRequest) -> dict[str, object]:
    """The settings UpdateTenant changes: the named fields, or all of them when none is named.
    An unknown name is passed on for the store to refuse with the list of valid ones."""
    settings = settings_from_record(request.tenant)
    fields = list(dict.fromkeys(request.fields)) or list(SETTINGS_FIELDS)
    return {f: getattr(settings, f) if f in SETTINGS_FIELDS else None for f in fields}


def record(info: TenantInfo) -> admin_pb2.TenantRecord:
    s = info.settings
    return admin_pb2.TenantRecord(
        name=info.name,
        sla_class=s.sla_class,
        weight=s.weight,
        guaranteed_share=s.guaranteed_share,
        burst_share=s.burst_share,
        rate_limit_rps=s.rate_limit_rps or 0.0,
        created_unix_ms=info.created_unix_ms,
        active_keys=info.active_keys,
    )


def sla_record(sla: SlaClass) -> admin_pb2.SlaClassRecord:
    out = admin_pb2.SlaClassRecord(name=sla.name, priority=sla.priority)
    if sla.ttft_ms is not None:
        out.ttft_ms = sla.ttft_ms
    if sla.tpot_ms is not None:
        out.tpot_ms = sla.tpot_ms
    return out


def sla_from_record(r: admin_pb2.SlaClassRecord) -> SlaClass:
    return SlaClass(
        r.name,
        r.ttft_ms if r.HasField("ttft_ms") else None,
        r.tpot_ms if r.HasField("tpot_ms") else None,
        r.priority,
    )
