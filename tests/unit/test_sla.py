"""SLA classes: the default table, the spec syntax and its errors, per-request judgement."""

import pytest

from strata.core.sla import DEFAULT_CLASS, SlaClass, SlaTable, parse_classes
from strata.store.tenants import DEFAULT_SLA_CLASS


def test_default_table():
    table = parse_classes("")
    assert [(c.name, c.ttft_ms, c.tpot_ms) for c in table.classes.values()] == [
        ("interactive", 500.0, 100.0),
        ("standard", 2000.0, 200.0),
        ("batch", None, None),
    ]
    assert table.classes["batch"].best_effort is True
    assert table.default == DEFAULT_CLASS == DEFAULT_SLA_CLASS == "standard"
    assert table.spec() == "interactive=500/100@2,standard=2000/200,batch=best-effort"


def test_spec_round_trips_and_allows_one_missing_target():
    table = parse_classes(" gold = 250/40 , standard=1000/- ,bulk=best-effort")
    assert table.classes["gold"] == SlaClass("gold", 250.0, 40.0, 1)
    assert table.classes["standard"] == SlaClass("standard", 1000.0, None, 1)
    assert parse_classes(table.spec()).classes == table.classes


def test_unknown_class_gets_the_default_targets_under_its_own_name():
    assert SlaTable().lookup("premium") == SlaClass("premium", 2000.0, 200.0, 1)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gold=250/40", "must include the default class 'standard', got gold"),
        ("standard", "'standard' must look like name=TTFT_MS/TPOT_MS or name=best-effort"),
        ("standard=200", "targets must be TTFT_MS/TPOT_MS"),
        ("standard=fast/10", "the TTFT target must be milliseconds or -, got 'fast'"),
        ("standard=100/0", "the TPOT target must be a positive number of milliseconds, got '0'"),
        ("standard=1/1,standard=2/2", "SLA class 'standard' is defined twice"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(ValueError) as err:
        parse_classes(spec)
    assert message in str(err.value)


def test_a_request_attains_when_it_succeeded_within_every_judged_target():
    interactive = SlaClass("interactive", 500.0, 100.0)
    assert interactive.attained(False, 500.0, 100.0) is True  # at the target: met
    assert interactive.attained(False, 500.1, 10.0) is False
    assert interactive.attained(False, 10.0, 100.1) is False
    assert interactive.attained(True, 10.0, 10.0) is False  # failed
    assert interactive.attained(False, 10.0, None) is True  # one-token answer
    assert SlaClass("batch", None, None).attained(False, 1e9, 1e9) is True


def test_priorities_default_by_kind_and_parse_after_at():
    table = parse_classes("rt=100/20@7,standard=2000/-,bulk=best-effort,low=best-effort@1")
    assert {n: c.priority for n, c in table.classes.items()} == {
        "rt": 7,
        "standard": 1,
        "bulk": 0,
        "low": 1,
    }
    assert table.spec() == "rt=100/20@7,standard=2000/-,bulk=best-effort,low=best-effort@1"
    assert {c.name: c.priority for c in SlaTable().classes.values()} == {
        "interactive": 2,
        "standard": 1,
        "batch": 0,
    }
    for bad, said in (("standard=1/1@x", "got 'x'"), ("standard=1/1@10", "got 10")):
        with pytest.raises(ValueError, match="priority after @ must be an integer") as err:
            parse_classes(bad)
        assert said in str(err.value)
