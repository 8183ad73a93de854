"""The KV tier store's background CPU class: every thread moves to SCHED_IDLE, threads started
afterwards inherit it, and the setting is validated where it is read."""

import os
import subprocess
import sys
import textwrap

import pytest

from services.kvstore.config import KVStoreConfig
from strata.core.settings import ConfigError


def test_every_thread_moves_to_the_idle_class_and_new_threads_inherit_it():
    # In a child process: a thread class cannot be raised back without privileges.
    script = textwrap.dedent("""
        import threading
        from strata.core import cpu_priority
        ready, done = threading.Event(), threading.Event()
        seen = {}
        def before():
            ready.set()
            done.wait()
            seen["before"] = cpu_priority.scheduling_class()
        t = threading.Thread(target=before)
        t.start()
        ready.wait()
        assert cpu_priority.scheduling_class() == "normal"
        moved = cpu_priority.to_background()
        done.set()
        t.join()
        after = threading.Thread(target=lambda: seen.update(after=cpu_priority.scheduling_class()))
        after.start()
        after.join()
        print(moved >= 2, cpu_priority.scheduling_class(), seen["before"], seen["after"])
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == ["True", "idle", "idle", "idle"]


def test_the_store_reads_its_cpu_class_and_rejects_others(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_KVSTORE_SHM_DIR", str(tmp_path))
    assert KVStoreConfig.from_env().kvstore_cpu_priority == "normal"
    monkeypatch.setenv("STRATA_KVSTORE_CPU_PRIORITY", "idle")
    assert KVStoreConfig.from_env().kvstore_cpu_priority == "idle"
    monkeypatch.setenv("STRATA_KVSTORE_CPU_PRIORITY", "low")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_KVSTORE_CPU_PRIORITY \(--kvstore-cpu-priority\): "
        r"Input should be 'normal' or 'idle', got 'low'",
    ):
        KVStoreConfig.from_env()
