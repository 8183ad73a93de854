"""host_memory.keep_freed_buffers: a step's megabyte temporaries come back from the heap, not
as fresh pages, once the engine has set glibc's thresholds; an operator's settings win."""

import platform
import resource

import pytest
import torch

from strata.engine import host_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _step_buffers() -> None:
    """Allocate, touch and free tensors of a prefill step's sizes (1-16 MiB)."""
    for mib in (1, 3, 6, 16):
        t = torch.empty(mib << 20, dtype=torch.uint8)
        t.fill_(1)
        del t


@glibc
def test_freed_step_buffers_are_reused_without_page_faults(monkeypatch):
    for name in host_memory.OPERATOR_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(host_memory, "_state", {})
    assert host_memory.keep_freed_buffers()
    _step_buffers()  # the heap grows to the largest once
    before = _faults()
    for _ in range(5):
        _step_buffers()
    # without the thresholds each round maps its 26 MiB anew: some 6,600 faults of 4 KiB a round
    assert _faults() - before < 1000


def test_the_operators_settings_win(monkeypatch):
    monkeypatch.setattr(host_memory, "_state", {})
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert not host_memory.keep_freed_buffers()
    assert not host_memory.keep_freed_buffers()  # the first answer holds


@glibc
def test_the_engine_sets_them_on_the_cpu(monkeypatch):
    from tests.engine_helpers import tiny_engine

    calls = []
    monkeypatch.setattr("strata.engine.engine.keep_freed_buffers", lambda: calls.append(1))
    tiny_engine()
    assert calls == [1]
