"""benchmarks.common: targets judged and printed as one table, free ports, the CPU meter, the
host line and the busy-machine note."""

import math
import os
import socket
import time

import pytest

from benchmarks.common import cpu, machine, ports
from benchmarks.common.tables import cell, ms, pct, table
from benchmarks.common.targets import Target, Verdict, all_met, reported, target_table


def test_a_value_at_its_threshold_meets_it_despite_float_rounding():
    higher = Target("P50 E2E vs baseline", "<=", 0.05, "{:.0%}", " higher")
    assert higher.met(2.1 / 2.0 - 1)  # 0.05000000000000004
    assert not higher.met(0.051)
    assert Target("saving", ">=", 0.65).met(0.65 - 1e-12)
    assert Target("growth", "<", 0.10).met(0.0999) and not Target("g", "<", 0.10).met(0.10)
    assert Target("leaks", "==", 0).met(0) and not Target("leaks", "==", 0).met(1)
    with pytest.raises(ValueError, match="comparison '=>'"):
        Target("x", "=>", 1.0)


def test_a_verdict_states_the_wanted_and_the_measured_and_unmeasured_fails():
    t = Target("memory vs device-only", ">=", 0.65, "{:.0%}", " less")
    v = t.judge(0.7, "70.0% less (1 vs 2 MiB)")
    assert v == Verdict(
        "memory vs device-only", ">= 65% less", "70.0% less (1 vs 2 MiB)", True, 0.7
    )
    assert t.judge(0.5, name="memory at 32k").name == "memory at 32k"
    assert Target("cosine", ">=", 0.99).judge(0.995).measured == "0.995"
    for missing in (None, math.nan):
        v = t.judge(missing)
        assert (v.measured, v.passed, v.verdict) == ("not measured", False, "FAIL")
    assert Target("needles", "==", 0.0, want="equal").judge(0.0).want == "equal"
    assert t.judge(0.7).line() == "PASS  memory vs device-only: 70% (wanted >= 65% less)"


def test_the_target_table_has_one_row_per_verdict_and_reported_rows_have_no_verdict():
    t = Target("utilization vs baseline", ">=", 0.2, "{:.0%}", " higher")
    rows = [
        t.judge(0.25, "+25.0%"),
        t.judge(0.1, "a | b"),
        reported("per GPU-hour", "(shown)", "+3%"),
    ]
    assert target_table(rows) == [
        "| target | wanted | measured | verdict |",
        "|---|---|---|---|",
        "| utilization vs baseline | >= 20% higher | +25.0% | PASS |",
        "| utilization vs baseline | >= 20% higher | a \\| b | FAIL |",
        "| per GPU-hour | (shown) | +3% | - |",
    ]
    assert not all_met(rows) and all_met([rows[0], rows[2]])


def test_cells_and_tables():
    assert (pct(0.1234), pct(None), ms(12345.6), ms(None)) == ("12.3%", "-", "12,346", "-")
    assert cell("a|b\nc ") == "a\\|b c"
    assert table(("a", "b"), [(1, 2)], align="lr") == ["| a | b |", "|---|---:|", "| 1 | 2 |"]


def test_free_ports_are_free_below_the_ephemeral_range_and_never_given_twice():
    given = [ports.free_port() for _ in range(20)]
    assert len(set(given)) == 20 and all(p in ports.PORTS for p in given)
    with socket.socket() as s:
        s.bind(("127.0.0.1", given[0]))  # free indeed
    base = ports.free_port_base((0, 1, 6))
    assert base % 10 == 0 and all(ports.is_free(base + o) for o in (0, 1, 6))
    assert not {base, base + 1, base + 6} & set(given)


def test_the_cpu_meter_splits_cores_between_watched_own_and_other():
    meter = cpu.CpuMeter([os.getpid()], children=True)
    spent = time.process_time()
    while time.process_time() - spent < 0.05:  # some CPU of our own: five clock ticks
        pass
    share = meter.stop()
    assert share.wall_s > 0
    assert share.watched > 0 and share.own > 0 and share.other >= 0  # this process is both
    assert share.ours == share.watched + share.own


def test_the_busy_note_only_when_other_work_took_cpu():
    assert cpu.busy_note([("a", 10.0, 0.2)], 2, "during the run", "noisy.") is None
    assert cpu.busy_note([], 2, "during the run", "noisy.") is None
    assert cpu.busy_note([("the run", 10.0, 0.5)], 2, "during the run", "noisy.") == (
        "**Busy machine:** other work used 0.50 cores on average during the run of the "
        "machine's 2; noisy."
    )


def test_the_host_line_from_stored_facts_and_from_this_machine():
    facts = {
        "cpu_model": "AMD EPYC",
        "cores": 2,
        "cpu_flags": [],
        "memory_gib": 7.5,
        "python": "3.11.9",
        "torch": None,
        "kernel": "6.1",
    }
    assert (
        machine.host_line(facts)
        == "AMD EPYC, 2 cores (no AVX-512), 7.5 GiB; Python 3.11.9, Linux 6.1"
    )
    here = machine.machine_facts()
    assert here["cores"] == os.cpu_count() and machine.host_line().startswith(here["cpu_model"])
