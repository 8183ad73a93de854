"""`strata tenants ...` against the gateway's Admin servicer in-process on port 0 (SQLite store):
the exact tables and JSON it prints, the admin key from the data dir, errors as `error: CODE:
sentence` with exit status 2."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from services.gateway.admin import AdminServicer
from strata.client import cli
from strata.client.settings import admin_key
from strata.core import defaults
from strata.core.sla import SlaTable
from strata.gateway.auth import Authenticator
from strata.gateway.tenant_directory import TenantDirectory
from strata.rpc.server import Registration, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.sla_classes import seed_sla_classes
from strata.store.tenants import authenticate
from strata.v1 import admin_pb2_grpc

ADMIN_KEY = "sk-strata-admin-cli-test"


@pytest.fixture
async def gateway(tmp_path, monkeypatch):
    """The Admin server's address; the admin key sits in the data dir, as the gateway writes it."""
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    async with sessions() as s:
        await seed_sla_classes(s, SlaTable())
    admin = AdminServicer(
        sessions,
        ADMIN_KEY,
        Authenticator(sessions, time.monotonic),
        TenantDirectory(sessions, time.monotonic),
        SlaTable(),
    )
    running = await start_server(
        [
            Registration(
                add=lambda s: admin_pb2_grpc.add_AdminServicer_to_server(admin, s),
                service_name="strata.v1.Admin",
            )
        ]
    )
    (tmp_path / defaults.ADMIN_KEY_FILE).write_text(ADMIN_KEY + "\n")
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("STRATA_ADMIN_KEY", raising=False)
    monkeypatch.setenv("STRATA_GATEWAY_ADDR", running.address)
    yield sessions
    await running.stop(0)
    await engine.dispose()


async def run(*argv: str) -> int:
    return await asyncio.to_thread(cli.main, ["tenants", *argv])


async def test_create_with_a_key_then_list_show_and_json(gateway, capsys):
    assert (
        await run(
            "create",
            "chat",
            "--class",
            "interactive",
            "--weight",
            "2",
            "--guaranteed-share",
            "0.1",
            "--burst-share",
            "0.5",
            "--rate-limit",
            "20",
            "--issue-key",
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[:7] == [
        "tenant              chat",
        "sla class           interactive",
        "weight              2",
        "guaranteed share    0.1",
        "burst share         0.5",
        "rate limit (req/s)  20",
        "active keys         1",
    ]
    assert out[7].startswith("created             20")
    assert out[8].startswith("api key: sk-strata-")
    key = out[8].split()[2]
    async with gateway() as s:
        assert await authenticate(s, key) == "chat"

    assert await run("create", "jobs", "--class", "batch") == 0
    capsys.readouterr()
    assert await run("list") == 0
    assert capsys.readouterr().out == (
        "tenant  class        weight  guaranteed  burst  rate_rps  keys\n"
        "chat    interactive       2         0.1    0.5        20     1\n"
        "jobs    batch             1           0      1   default     0\n"
    )
    assert await run("show", "jobs", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown.pop("created_unix_ms") > 1_600_000_000_000
    assert shown == {
        "name": "jobs",
        "sla_class": "batch",
        "weight": 1.0,
        "guaranteed_share": 0.0,
        "burst_share": 1.0,
        "rate_limit_rps": None,
        "active_keys": 0,
    }


async def test_update_changes_only_the_options_given(gateway, capsys):
    assert (
        await run(
            "create",
            "chat",
            "--guaranteed-share",
            "0.2",
            "--burst-share",
            "0.6",
            "--rate-limit",
            "5",
        )
        == 0
    )
    capsys.readouterr()
    assert await run("update", "chat", "--burst-share", "0.9", "--rate-limit", "0", "--json") == 0
    updated = json.loads(capsys.readouterr().out)
    assert {
        k: updated[k]
        for k in ("sla_class", "weight", "guaranteed_share", "burst_share", "rate_limit_rps")
    } == {
        "sla_class": "standard",
        "weight": 1.0,
        "guaranteed_share": 0.2,
        "burst_share": 0.9,
        "rate_limit_rps": None,
    }
    assert await run("update", "chat") == 2
    assert capsys.readouterr().err == (
        "error: name at least one setting to change (--class, --weight, --guaranteed-share, "
        "--burst-share, --rate-limit)\n"
    )


async def test_keys_are_issued_revoked_and_deleted_with_their_tenant(gateway, capsys):
    assert await run("create", "chat") == 0
    assert await run("issue-key", "chat") == 0
    assert await run("issue-key", "chat") == 0
    _, first, second = capsys.readouterr().out.strip().splitlines()[-3:]
    assert first.startswith("sk-strata-") and second.startswith("sk-strata-")
    assert await run("revoke-key", first) == 0
    assert capsys.readouterr().out == "revoked\n"
    assert await run("delete", "chat") == 0
    assert capsys.readouterr().out == "deleted tenant 'chat' (1 active key(s) revoked)\n"
    async with gateway() as s:
        assert (await authenticate(s, first), await authenticate(s, second)) == (None, None)


async def test_refusals_print_the_code_and_sentence_and_exit_2(gateway, capsys):
    assert await run("create", "chat", "--guaranteed-share", "0.7", "--burst-share", "0.5") == 2
    assert capsys.readouterr().err == (
        "error: INVALID_ARGUMENT: burst_share must be between "
        "guaranteed_share (0.7) and 1, got 0.5\n"
    )
    assert await run("show", "ghost") == 2
    assert capsys.readouterr().err == (
        "error: NOT_FOUND: tenant 'ghost' does not exist; `strata tenants list` shows the tenants\n"
    )
    assert await run("list", "--admin-key", "sk-strata-wrong") == 2
    assert capsys.readouterr().err.startswith(
        "error: PERMISSION_DENIED: this key is not the gateway's admin key"
    )
    with pytest.raises(SystemExit):
        await run("create", "chat", "--weight", "0")
    assert "--weight: must be a positive number, got 0" in capsys.readouterr().err


async def test_classes_are_listed_and_set_class_keeps_what_it_is_not_given(gateway, capsys):
    assert (
        await run("set-class", "gold", "--ttft-ms", "300", "--tpot-ms", "50", "--priority", "3")
        == 0
    )
    assert capsys.readouterr().out == (
        "class  priority  ttft_ms  tpot_ms\ngold          3      300       50\n"
    )
    assert await run("set-class", "gold", "--tpot-ms", "-") == 0
    assert capsys.readouterr().out == (
        "class  priority  ttft_ms  tpot_ms\ngold          3      300        -\n"
    )
    assert await run("set-class", "bulk") == 0  # new, no targets: best effort, priority 0
    capsys.readouterr()
    assert await run("classes") == 0
    assert capsys.readouterr().out == (
        "class        priority  ttft_ms  tpot_ms\n"
        "gold                3      300        -\n"
        "interactive         2      500      100\n"
        "standard            1     2000      200\n"
        "batch               0        -        -\n"
        "bulk                0        -        -\n"
        "targets are P99 in ms (-: not judged; both -: best-effort); default class: standard\n"
    )
    assert await run("classes", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["default_class"] == "standard"
    assert listed["classes"][0] == {
        "name": "gold",
        "priority": 3,
        "ttft_ms": 300.0,
        "tpot_ms": None,
    }


def test_the_admin_key_comes_from_the_option_the_environment_or_the_data_dir(tmp_path):
    (tmp_path / defaults.ADMIN_KEY_FILE).write_text("from-file\n")
    env = {"STRATA_DATA_DIR": str(tmp_path)}
    assert admin_key("given", {**env, "STRATA_ADMIN_KEY": "from-env"}) == "given"
    assert admin_key(None, {**env, "STRATA_ADMIN_KEY": "from-env"}) == "from-env"
    assert admin_key(None, env) == "from-file"
    missing = {"STRATA_DATA_DIR": str(tmp_path / "elsewhere")}
    with pytest.raises(ValueError, match=r"^no admin key: pass --admin-key, set STRATA_ADMIN_KEY"):
        admin_key(None, missing)
