"""The benchmark's KV tier store process: started on a free port with the sizes it was given,
reporting them per tier through GetStats, stopped cleanly; a store that cannot start is named
with its log."""

import os

import pytest

from benchmarks.kv.store_process import StoreProcess

MIB = 1 << 20


def test_store_process_serves_with_the_given_tier_sizes(tmp_path):
    store = StoreProcess(
        host_bytes=8 * MIB,
        disk_bytes=3 * MIB,
        disk_dir=str(tmp_path / "disk"),
        log_path=str(tmp_path / "store.log"),
        slab_bytes=MIB,
    )
    try:
        store.start()
        stats = store.stats()
    finally:
        code = store.stop()
    assert code == 0
    assert stats.blocks == 0 and stats.hits == 0
    host, disk = stats.tier("host"), stats.tier("disk")
    assert host is not None and host.bytes_capacity == 8 * MIB
    assert disk is not None and disk.bytes_capacity == 3 * MIB
    assert "kvstore listening on " + store.address in (tmp_path / "store.log").read_text()
    assert store.shm_dir and not os.path.exists(store.shm_dir)  # its segment is gone


def test_an_idle_class_store_serves_with_every_thread_in_sched_idle(tmp_path):
    store = StoreProcess(
        host_bytes=4 * MIB,
        disk_bytes=0,
        disk_dir=str(tmp_path / "disk"),
        log_path=str(tmp_path / "store.log"),
        slab_bytes=MIB,
        cpu_priority="idle",
    )
    try:
        store.start()
        assert store.stats().blocks == 0
        tids = os.listdir(f"/proc/{store.pid}/task")
        classes = {os.sched_getscheduler(int(t)) for t in tids}
    finally:
        assert store.stop() == 0
    assert classes == {os.SCHED_IDLE}
    assert "CPU class idle" in (tmp_path / "store.log").read_text()


def test_a_store_that_cannot_start_is_reported_with_its_log(tmp_path):
    # the disk tier's folder would have to live inside a plain file
    (tmp_path / "file").write_text("")
    store = StoreProcess(
        host_bytes=MIB,
        disk_bytes=MIB,
        disk_dir=str(tmp_path / "file" / "disk"),
        log_path=str(tmp_path / "store.log"),
        slab_bytes=MIB,
    )
    try:
        with pytest.raises(RuntimeError, match=r"exited with code \d+ before serving.*store\.log"):
            store.start()
    finally:
        store.stop()
    assert store.shm_dir and not os.path.exists(store.shm_dir)
