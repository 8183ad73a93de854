"""Energy sources: RAPL from a fake powercap tree (zone choice, wraparound, unreadable zones),
the power model, the meter's integration and hand-over, NVML when present."""

import os

import pytest

from strata.node.energy import (
    EnergyCounterError,
    EnergyMeter,
    NvmlCounter,
    PowerModel,
    RaplCounter,
    open_counter,
)


def zone(root, name: str, label: str, uj: int, max_uj: int = 1_000_000) -> str:
    path = root / name
    path.mkdir()
    (path / "name").write_text(label + "\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return str(path)


def set_uj(root, name: str, uj: int) -> None:
    (root / name / "energy_uj").write_text(f"{uj}\n")


@pytest.fixture
def powercap(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", 900_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside the package: not added
    zone(tmp_path, "intel-rapl:0:1", "dram", 100)  # outside it: added
    zone(tmp_path, "intel-rapl:1", "package-1", 0)
    zone(tmp_path, "intel-rapl:2", "psys", 0)  # would count the packages twice
    (tmp_path / "intel-rapl").mkdir()  # the control type, no counter
    return tmp_path


def test_rapl_sums_packages_and_dram_and_folds_in_wraparound(powercap):
    counter = RaplCounter.open(str(powercap))
    assert [os.path.basename(z.path) for z in counter.zones] == [
        "intel-rapl:0",
        "intel-rapl:0:1",
        "intel-rapl:1",
    ]
    assert counter.read_joules() == 0.0
    set_uj(powercap, "intel-rapl:0", 950_000)  # +50_000
    set_uj(powercap, "intel-rapl:0:1", 600)  # +500
    set_uj(powercap, "intel-rapl:1", 2_000)  # +2_000
    assert counter.read_joules() == pytest.approx(0.0525)
    set_uj(powercap, "intel-rapl:0", 30_000)  # wrapped at 1_000_000: +80_000
    set_uj(powercap, "intel-rapl:0:0", 0)  # the core subzone is never read
    assert counter.read_joules() == pytest.approx(0.1325)


def test_rapl_without_readable_zones_is_unavailable(tmp_path):
    assert RaplCounter.open(str(tmp_path / "absent")) is None
    zone(tmp_path, "intel-rapl:0", "package-0", 1)
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("not a number\n")
    assert RaplCounter.open(str(tmp_path)) is None
    with pytest.raises(ValueError, match="no RAPL zone under .* is readable"):
        open_counter("rapl", str(tmp_path))


def test_power_model_is_a_line_from_idle_to_tdp():
    model = PowerModel(idle_watts=50.0, tdp_watts=250.0)
    assert [model.watts(u) for u in (0.0, 0.25, 1.0, 1.7, -1.0)] == [
        50.0,
        100.0,
        250.0,
        250.0,
        50.0,
    ]
    with pytest.raises(ValueError, match="0 <= idle watts <= TDP watts"):
        PowerModel(idle_watts=300.0, tdp_watts=250.0)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_meter_integrates_the_model_over_each_interval():
    clock = Clock()
    meter = EnergyMeter(None, PowerModel(50.0, 250.0), clock)
    clock.t += 2.0
    first = meter.read(utilization=0.5)  # 150 W for 2 s
    clock.t += 4.0
    second = meter.read(utilization=0.0)  # 50 W for 4 s
    assert (first.joules, first.watts, first.source) == (300.0, 150.0, "model")
    assert (second.joules, second.watts) == (500.0, 50.0)


class FakeCounter:
    name = "rapl"

    def __init__(self, values) -> None:
        self.values = list(values)

    def read_joules(self) -> float:
        value = self.values.pop(0)
        if value is None:
            raise EnergyCounterError("zone unreadable")
        return value


def test_meter_reports_counter_differences_and_hands_over_to_the_model_on_failure():
    clock = Clock()
    meter = EnergyMeter(FakeCounter([1000.0, 1300.0, None]), PowerModel(10.0, 110.0), clock)
    assert meter.source == "rapl"
    clock.t += 3.0
    measured = meter.read(utilization=1.0)
    assert (measured.joules, measured.watts, measured.source) == (300.0, 100.0, "rapl")
    clock.t += 1.0
    modelled = meter.read(utilization=0.5)  # counter failed: 60 W for 1 s
    assert (modelled.joules, modelled.watts, modelled.source) == (360.0, 60.0, "model")
    assert meter.source == "model"


def test_source_choice():
    assert open_counter("model") is None
    with pytest.raises(ValueError, match="energy source must be one of auto, nvml, rapl, model"):
        open_counter("gpu")


def test_nvml_counter_on_nvidia_gpus():
    counter = NvmlCounter.open()
    if counter is None:
        pytest.skip("no NVIDIA GPU with an energy counter visible through NVML here")
    first = counter.read_joules()
    assert counter.read_joules() >= first > 0
