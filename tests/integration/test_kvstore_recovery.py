"""The KV tier store as a real process: kill -9, corrupt what it left on disk, restart, and the
directory comes back from the disk tier's manifest with the bad blocks dropped, never served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from benchmarks.common.ports import free_port
from benchmarks.common.stack import (
    ROOT,
    StackProcess,
    operator_identity,
    wait_serving,
)
from strata.core.lifeline import child_env
from strata.kvtier.disk_tier import BLOCKS_DIR, block_filename
from strata.kvtier.hashing import checksum, to_bytes
from strata.rpc.channels import sync_channel
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

BLOCK = 1024


def _start(tmp_path, port: int, log_name: str) -> StackProcess:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}/libs:{ROOT}",
        "STRATA_KVSTORE_BIND": f"127.0.0.1:{port}",
        "STRATA_KVSTORE_NODE_ID": "node-r",
        "STRATA_KVSTORE_HOST_BYTES": str(16 * BLOCK),
        "STRATA_KVSTORE_SLAB_BYTES": "4096",
        "STRATA_KVSTORE_DISK_BYTES": str(256 * BLOCK),
        "STRATA_KVSTORE_DISK_DIR": str(tmp_path / "disk"),
        "STRATA_KVSTORE_SHM_DIR": str(tmp_path),
        "STRATA_DATA_DIR": str(tmp_path),
    }
    log_path = tmp_path / log_name
    p = StackProcess(
        "kvstore",
        [sys.executable, "-m", "services.kvstore"],
        env,
        f"127.0.0.1:{port}",
        log_path=log_path,
    )
    p.proc = subprocess.Popen(
        p.command,
        cwd=ROOT,
        env=child_env(env),
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
    )
    wait_serving(p, 240, operator_identity(tmp_path))
    return p


def _blocks(n: int) -> list[kvstore_pb2.KVBlock]:
    out = []
    for h in range(1, n + 1):
        data = h.to_bytes(4, "little") * (BLOCK // 4)
        out.append(
            kvstore_pb2.KVBlock(
                block_hash=to_bytes(h), layout="L", data=data, checksum=checksum(data)
            )
        )
    return out


def test_kill_dash_nine_then_restart_rebuilds_the_directory_from_disk(tmp_path):
    port = free_port()
    blocks = _blocks(40)
    p = _start(tmp_path, port, "first.log")
    try:
        with sync_channel(p.address, operator_identity(tmp_path)) as ch:
            stub = kvstore_pb2_grpc.KVStoreStub(ch)
            for i in range(0, 40, 8):
                stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=blocks[i : i + 8]), timeout=240)
            deadline = time.monotonic() + 240
            # The migrator demotes once the host tier passes its high watermark (0.90 of 16
            # slots), down to the low one (12 slots); puts landing meanwhile can leave it
            # anywhere at or under 14. Wait until it is under the high one and has held still
            # for half a second, so that the disk holds what the stats say when the kill lands.
            seen, still_since = None, time.monotonic()
            while time.monotonic() < deadline:
                stats = stub.GetStats(kvstore_pb2.KVStatsRequest(), timeout=240)
                tiers = {t.tier: t.blocks for t in stats.tiers}
                if (tiers["host"], tiers["disk"]) != seen:
                    seen, still_since = (tiers["host"], tiers["disk"]), time.monotonic()
                elif tiers["host"] <= 0.90 * 16 and time.monotonic() - still_since >= 0.5:
                    break
                time.sleep(0.05)
            assert stats.blocks == 40 and tiers["host"] + tiers["disk"] == 40
            on_disk = tiers["disk"]
            assert on_disk >= 26
    finally:
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait()

    # Damage two blocks behind the store's back: one file corrupted, one gone.
    files = sorted((tmp_path / "disk" / BLOCKS_DIR).glob("*.blk"))
    assert len(files) == on_disk
    corrupt, missing = files[0], files[1]
    corrupt.write_bytes(b"\xff" * BLOCK)
    missing.unlink()
    bad = {int(f.name.split(".")[0], 16) for f in (corrupt, missing)}

    p = _start(tmp_path, port, "second.log")
    try:
        with sync_channel(p.address, operator_identity(tmp_path)) as ch:
            stub = kvstore_pb2_grpc.KVStoreStub(ch)
            stats = stub.GetStats(kvstore_pb2.KVStatsRequest(), timeout=240)
            # host memory died with the process; disk came back, less the two damaged blocks
            assert (stats.recovered_blocks, stats.dropped_corrupt) == (on_disk - 2, 2)
            assert stats.blocks == on_disk - 2
            served = 0
            for blk in blocks:
                h = int.from_bytes(blk.block_hash, "big")
                got = stub.GetBlocks(
                    kvstore_pb2.GetBlocksRequest(block_hashes=[blk.block_hash]), timeout=240
                ).blocks
                if h in bad:
                    assert list(got) == []
                elif got:
                    assert got[0].data == blk.data and got[0].checksum == blk.checksum
                    served += 1
            assert served == on_disk - 2
            assert not (tmp_path / "disk" / BLOCKS_DIR / block_filename(min(bad))).exists()
    finally:
        p.proc.send_signal(signal.SIGTERM)
        assert p.proc.wait(30) == 0
