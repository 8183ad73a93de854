"""`strata tenants`: tenants, their API keys and the SLA classes, through the gateway's Admin API.

    strata tenants create acme --class interactive --weight 2 --guaranteed-share 0.1 \\
        --burst-share 0.5 --rate-limit 20 --issue-key
    strata tenants update acme --burst-share 0.8       # only the options given change
    strata tenants show acme
    strata tenants list --json
    strata tenants issue-key acme
    strata tenants revoke-key sk-strata-...
    strata tenants delete acme                         # its keys stop working at once
    strata tenants classes
    strata tenants set-class gold --ttft-ms 300 --tpot-ms 50 --priority 3

Changes hold at the next request without a restart. The admin key comes from --admin-key, else
STRATA_ADMIN_KEY, else the admin_key file the gateway writes in the data dir (STRATA_DATA_DIR,
default ./.strata); the gateway from --gateway, else STRATA_GATEWAY_ADDR, else the default.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from strata.client.settings import admin_key, gateway_address, tls_ca
from strata.client.tenants_format import (
    NO_TARGET,
    class_dict,
    format_class_table,
    format_classes,
    format_tenant,
    format_tenants,
    tenant_dict,
)
from strata.core import defaults
from strata.rpc.channels import public_channel
from strata.v1 import admin_pb2, admin_pb2_grpc

ADMIN_TIMEOUT_S = 30.0


def _positive(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _target(text: str) -> float | None:
    if text == NO_TARGET:
        return None
    return _positive(text)


# CLI option dest -> TenantRecord field
_SETTINGS = {
    "sla_class": "sla_class",
    "weight": "weight",
    "guaranteed_share": "guaranteed_share",
    "burst_share": "burst_share",
    "rate_limit": "rate_limit_rps",
}


def _add_settings(p: argparse.ArgumentParser) -> None:
    p.add_argument("--class", dest="sla_class", help="SLA class (`strata tenants classes`)")
    p.add_argument("--weight", type=_positive, help="fair-share weight on a node (default 1)")
    p.add_argument(
        "--guaranteed-share",
        type=_number,
        dest="guaranteed_share",
        help="fraction of the pool always admitted, 0..1 (default 0)",
    )
    p.add_argument(
        "--burst-share",
        type=_positive,
        dest="burst_share",
        help="the most of the pool it may hold, guaranteed share..1 (default 1)",
    )
    p.add_argument(
        "--rate-limit",
        type=_number,
        dest="rate_limit",
        metavar="RPS",
        help="requests per second at the gateway; 0 = the gateway default",
    )


def add_tenants_parser(sub: argparse._SubParsersAction) -> None:
    """Register `tenants` on the `strata` command's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--admin-key",
        help="the gateway's admin key (default: STRATA_ADMIN_KEY or the data dir's admin_key file)",
    )
    common.add_argument(
        "--gateway",
        dest="admin_gateway",
        help=f"gateway host:port (default: STRATA_GATEWAY_ADDR or {defaults.GATEWAY_ADDR})",
    )
    common.add_argument("--json", action="store_true", help="print JSON for machines")
    p = sub.add_parser(
        "tenants",
        help="tenants, API keys and SLA classes (admin)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="tenants_command", required=True)

    create = verbs.add_parser("create", parents=[common], help="create a tenant")
    create.add_argument("name")
    _add_settings(create)
    create.add_argument(
        "--issue-key", action="store_true", help="also issue its first API key (printed once)"
    )
    create.set_defaults(handler=_create)
    update = verbs.add_parser(
        "update", parents=[common], help="change a tenant's settings (only the options given)"
    )
    update.add_argument("name")
    _add_settings(update)
    update.set_defaults(handler=_update)
    for verb, handler, what in (
        ("show", _show, "one tenant"),
        ("delete", _delete, "delete a tenant and its keys"),
        ("issue-key", _issue_key, "issue an API key (printed once)"),
    ):
        v = verbs.add_parser(verb, parents=[common], help=what)
        v.add_argument("name")
        v.set_defaults(handler=handler)
    verbs.add_parser("list", parents=[common], help="every tenant").set_defaults(handler=_list)
    revoke = verbs.add_parser(
        "revoke-key", parents=[common], help="revoke an API key (it fails at once)"
    )
    revoke.add_argument("key")
    revoke.set_defaults(handler=_revoke_key)
    verbs.add_parser("classes", parents=[common], help="the SLA classes").set_defaults(
        handler=_classes
    )
    put = verbs.add_parser(
        "set-class",
        parents=[common],
        help="add an SLA class or change one (options not given keep their values)",
    )
    put.add_argument("name")
    # Absent unless given: `-` (None, not judged) must differ from "keep the class's target".
    put.add_argument(
        "--ttft-ms",
        type=_target,
        default=argparse.SUPPRESS,
        help=f"P99 TTFT target; {NO_TARGET} = not judged",
    )
    put.add_argument(
        "--tpot-ms",
        type=_target,
        default=argparse.SUPPRESS,
        help=f"P99 TPOT target; {NO_TARGET} = not judged",
    )
    put.add_argument(
        "--priority",
        type=int,
        help="0-9, higher runs first (default for a new class: 1 with a target, 0 without)",
    )
    put.set_defaults(handler=_set_class)


class _Admin:
    """The Admin stub with the admin key on every call."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.metadata = (("authorization", f"Bearer {admin_key(args.admin_key)}"),)
        address = gateway_address(args.admin_gateway or getattr(args, "gateway", None))
        self.channel = public_channel(address, tls_ca(getattr(args, "tls_ca", None)))
        self.stub = admin_pb2_grpc.AdminStub(self.channel)

    async def __aenter__(self) -> _Admin:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.channel.close()

    def call(self, method: str, request):
        return getattr(self.stub, method)(request, metadata=self.metadata, timeout=ADMIN_TIMEOUT_S)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gave, keyed by TenantRecord field, valued as argparse
    parsed them (a str for the class, numbers for the rest)."""
    return {
        field: getattr(args, dest)
        for dest, field in _SETTINGS.items()
        if getattr(args, dest) is not None
    }


async def _create(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        reply = await admin.call(
            "CreateTenant",
            admin_pb2.CreateTenantRequest(
                tenant=admin_pb2.TenantRecord(name=args.name, **_given(args)),
                issue_key=args.issue_key,
            ),
        )
    rec, key = reply.tenant, reply.api_key or None
    if args.json:
        out = tenant_dict(rec)
        if key is not None:
            out["api_key"] = key
        _print_json(out)
        return 0
    print(format_tenant(rec))
    if key is not None:
        print(f"api key: {key}  (shown only now; the store keeps its hash)")
    return 0


async def _update(args: argparse.Namespace) -> int:
    given = _given(args)
    if not given:
        print(
            "error: name at least one setting to change (--class, --weight, "
            "--guaranteed-share, --burst-share, --rate-limit)",
            file=sys.stderr,
        )
        return 2
    async with _Admin(args) as admin:
        rec = await admin.call(
            "UpdateTenant",
            admin_pb2.UpdateTenantRequest(
                tenant=admin_pb2.TenantRecord(name=args.name, **given), fields=list(given)
            ),
        )
    _print_tenant(args, rec)
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        rec = await admin.call("GetTenant", admin_pb2.GetTenantRequest(name=args.name))
    _print_tenant(args, rec)
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        reply = await admin.call("ListTenants", admin_pb2.ListTenantsRequest())
    if args.json:
        _print_json([tenant_dict(t) for t in reply.tenants])
    else:
        print(format_tenants(reply.tenants))
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        reply = await admin.call("DeleteTenant", admin_pb2.DeleteTenantRequest(name=args.name))
    if args.json:
        _print_json({"tenant": args.name, "keys_revoked": reply.keys_revoked})
    else:
        print(f"deleted tenant {args.name!r} ({reply.keys_revoked} active key(s) revoked)")
    return 0


async def _issue_key(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        reply = await admin.call("IssueKey", admin_pb2.IssueKeyRequest(tenant=args.name))
    if args.json:
        _print_json({"tenant": reply.tenant, "api_key": reply.api_key})
    else:
        print(reply.api_key)  # alone on its line, for scripts; shown only now
    return 0


async def _revoke_key(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        reply = await admin.call("RevokeKey", admin_pb2.RevokeKeyRequest(api_key=args.key))
    if args.json:
        _print_json({"revoked": reply.revoked})
    else:
        print("revoked")
    return 0


async def _classes(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        reply = await admin.call("ListSlaClasses", admin_pb2.ListSlaClassesRequest())
    if args.json:
        _print_json(
            {
                "default_class": reply.default_class,
                "classes": [class_dict(c) for c in reply.classes],
            }
        )
    else:
        print(format_classes(reply))
    return 0


async def _set_class(args: argparse.Namespace) -> int:
    async with _Admin(args) as admin:
        listed = await admin.call("ListSlaClasses", admin_pb2.ListSlaClassesRequest())
        current = next((c for c in listed.classes if c.name == args.name), None)
        ttft = _merged(args, current, "ttft_ms")
        tpot = _merged(args, current, "tpot_ms")
        priority = args.priority
        if priority is None:
            priority = (
                current.priority
                if current is not None
                else int(ttft is not None or tpot is not None)
            )
        stored = await admin.call(
            "PutSlaClass",
            admin_pb2.SlaClassRecord(name=args.name, priority=priority, ttft_ms=ttft, tpot_ms=tpot),
        )
    if args.json:
        _print_json(class_dict(stored))
    else:
        print(format_class_table([stored]))
    return 0


def _merged(
    args: argparse.Namespace, current: admin_pb2.SlaClassRecord | None, field: str
) -> float | None:
    """The target to store: the option when given (None for `-`), else the class's own."""
    if hasattr(args, field):
        return getattr(args, field)
    if current is None or not current.HasField(field):
        return None
    return getattr(current, field)


def _print_tenant(args: argparse.Namespace, rec: admin_pb2.TenantRecord) -> None:
    if args.json:
        _print_json(tenant_dict(rec))
    else:
        print(format_tenant(rec))


def _print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))
