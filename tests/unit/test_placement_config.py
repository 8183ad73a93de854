"""Placement planner settings: the policy switch, curve grid and migration cost from the
environment, and the errors that name the variable."""

import pytest

from services.placement.config import BUNDLED_PROFILES, PlacementConfig
from strata.core.settings import ConfigError


def test_batch_aware_settings_from_env(monkeypatch):
    for var, value in {
        "STRATA_PLACEMENT_POLICY": "ffd",
        "STRATA_METRICS_ADDR": "metrics:1",
        "STRATA_PLACEMENT_WINDOW_S": "900",
        "STRATA_PLACEMENT_WINDOWS": "4",
        "STRATA_PLACEMENT_CURVE_DAYS": "7",
        "STRATA_PLACEMENT_PROFILES": "none",
        "STRATA_PLACEMENT_LOAD_BYTES_PER_S": "1e9",
        "STRATA_PLACEMENT_WARMUP_S": "5",
        "STRATA_PLACEMENT_HORIZON_S": "0",
        "STRATA_PLACEMENT_MAX_MOVES": "2",
        "STRATA_PLACEMENT_BURST_S": "60",
    }.items():
        monkeypatch.setenv(var, value)
    cfg = PlacementConfig.from_env()
    assert (
        cfg.placement_policy,
        cfg.metrics_addr,
        cfg.placement_window_s,
        cfg.placement_windows,
        cfg.placement_curve_days,
        cfg.placement_profiles,
        cfg.placement_load_bytes_per_s,
        cfg.placement_warmup_s,
        cfg.placement_max_moves,
    ) == ("ffd", "metrics:1", 900.0, 4, 7, "none", 1e9, 5.0, 2)
    assert cfg.planning_horizon_s == 86_400.0  # a daily curve plans a day ahead
    assert cfg.placement_burst_s == 60.0


def test_defaults_plan_batch_aware_over_the_last_hour_with_the_bundled_profiles():
    cfg = PlacementConfig.from_env()
    assert (cfg.placement_policy, cfg.placement_profiles, cfg.planning_horizon_s) == (
        "batch-aware",
        BUNDLED_PROFILES,
        3600.0,
    )


def test_a_lookahead_plans_the_coming_windows_of_the_day(monkeypatch):
    monkeypatch.setenv("STRATA_PLACEMENT_WINDOW_S", "1800")
    monkeypatch.setenv("STRATA_PLACEMENT_CURVE_DAYS", "3")
    monkeypatch.setenv("STRATA_PLACEMENT_LOOKAHEAD_WINDOWS", "2")
    cfg = PlacementConfig.from_env()
    assert cfg.placement_lookahead_windows == 2
    assert cfg.planning_horizon_s == 3600.0  # a plan is expected to hold two windows


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            dict(placement_policy="best"),
            r"STRATA_PLACEMENT_POLICY \(--placement-policy\): Input "
            r"should be 'batch-aware' or 'ffd', got 'best'",
        ),
        (
            dict(placement_window_s=0),
            r"STRATA_PLACEMENT_WINDOW_S \(--placement-window-s\): Input "
            r"should be greater than 0, got 0",
        ),
        (
            dict(placement_window_s=7000, placement_curve_days=1),
            "STRATA_PLACEMENT_WINDOW_S must divide a day",
        ),
        (
            dict(placement_lookahead_windows=2),
            "STRATA_PLACEMENT_LOOKAHEAD_WINDOWS needs daily arrival curves",
        ),
        (
            dict(placement_window_s=3600, placement_curve_days=1, placement_lookahead_windows=25),
            r"LOOKAHEAD_WINDOWS must be at most the windows in a day \(24\), got 25",
        ),
        (
            dict(placement_window_s=25),
            r"STRATA_PLACEMENT_BURST_S must be 0 \(window means only\) or "
            r"divide STRATA_PLACEMENT_WINDOW_S \(25 s\), got 30",
        ),
        (
            dict(placement_burst_s=-5),
            r"STRATA_PLACEMENT_BURST_S \(--placement-burst-s\): Input "
            r"should be greater than or equal to 0",
        ),
        (dict(placement_warmup_s=-1), r"STRATA_PLACEMENT_WARMUP_S \(--placement-warmup-s\)"),
        (dict(replicas="a=x", models="a"), "STRATA_REPLICAS needs an integer, got 'x'"),
        (
            dict(model_memory_bytes="a"),
            "STRATA_MODEL_MEMORY_BYTES entries must look like name=number, got 'a'",
        ),
    ],
)
def test_bad_settings_name_the_variable(fields, message):
    with pytest.raises(ConfigError, match=message):
        PlacementConfig.from_env(**fields)
