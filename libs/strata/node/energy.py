"""A node's energy: measured counters where the hardware offers one, a labelled model otherwise.

Sources, in the order `auto` tries them:

    nvml   NVIDIA GPUs' total-energy counter (mJ since the driver loaded, Volta and newer),
           summed over the visible GPUs; through pynvml when installed, else libnvidia-ml
           directly, so GPU nodes need no extra package.
    rapl   Intel RAPL (also AMD on recent kernels) from /sys/class/powercap: the top-level
           package zones plus their `dram` subzones (cores and uncore are inside the package
           already; psys would count the package twice). energy_uj wraps at
           max_energy_range_uj; every read adds the difference modulo that range, so reads must
           come more often than one wrap (minutes to hours at full power). Readable by root
           only on most kernels since 2020.
    model  idle + utilization x (TDP - idle), from configured watts. Not a measurement: every
           report labels it "modelled".

EnergyMeter turns one source into cumulative joules since the meter started and the mean power
of each interval; the node manager's sampler reports both with every node sample.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

POWERCAP_ROOT = "/sys/class/powercap"


class EnergySource(enum.StrEnum):
    AUTO = "auto"  # nvml, else rapl, else the power model
    NVML = "nvml"
    RAPL = "rapl"
    MODEL = "model"


SOURCES = tuple(s.value for s in EnergySource)
_TOP_ZONE = re.compile(r"intel-rapl:\d+")
_SUB_ZONE = re.compile(r"intel-rapl:\d+:\d+")


class EnergyCounterError(RuntimeError):
    """A counter that worked before cannot be read now."""


class EnergyCounter(Protocol):
    """A cumulative energy counter. read_joules() never decreases between calls on one object
    (wraparound is folded in), and only differences between reads mean anything."""

    name: str

    def read_joules(self) -> float: ...


@dataclass(slots=True, frozen=True)
class PowerModel:
    """Power as a straight line in utilization, from idle watts to TDP at full utilization."""

    idle_watts: float
    tdp_watts: float

    def __post_init__(self) -> None:
        if not 0 <= self.idle_watts <= self.tdp_watts:
            raise ValueError(
                f"the power model needs 0 <= idle watts <= TDP watts, got idle "
                f"{self.idle_watts} and TDP {self.tdp_watts}"
            )

    def watts(self, utilization: float) -> float:
        u = min(max(utilization, 0.0), 1.0)
        return self.idle_watts + u * (self.tdp_watts - self.idle_watts)


@dataclass(slots=True)
class _RaplZone:
    path: str
    max_range_uj: int
    last_uj: int


class RaplCounter:
    name = "rapl"

    def __init__(self, zones: list[_RaplZone]) -> None:
        self.zones = zones
        self.total_uj = 0

    @classmethod
    def open(cls, root: str = POWERCAP_ROOT) -> RaplCounter | None:
        """The counter over root's readable zones, or None when none can be read."""
        try:
            entries = sorted(os.listdir(root))
        except OSError:
            return None
        zones = []
        for entry in entries:
            top = _TOP_ZONE.fullmatch(entry)
            if not top and not _SUB_ZONE.fullmatch(entry):
                continue
            path = os.path.join(root, entry)
            name = _read_text(os.path.join(path, "name"))
            if (top and name == "psys") or (not top and name != "dram"):
                continue
            try:
                zones.append(
                    _RaplZone(
                        path,
                        int(_read_text(os.path.join(path, "max_energy_range_uj"))),
                        _read_uj(path),
                    )
                )
            except (OSError, ValueError):
                continue  # unreadable (root only) or malformed: not a zone we can use
        return cls(zones) if zones else None

    def read_joules(self) -> float:
        for zone in self.zones:
            try:
                now = _read_uj(zone.path)
            except (OSError, ValueError) as err:
                raise EnergyCounterError(f"RAPL zone {zone.path} unreadable: {err}") from err
            delta = now - zone.last_uj
            if delta < 0:
                # The counter passed max_energy_range_uj and restarted from zero (once: see the
                # module docstring on read frequency).
                delta += zone.max_range_uj
            self.total_uj += max(delta, 0)
            zone.last_uj = now
        return self.total_uj / 1e6


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _read_uj(zone_path: str) -> int:
    with open(os.path.join(zone_path, "energy_uj"), encoding="ascii") as f:
        return int(f.read().strip())


class NvmlCounter:
    name = "nvml"

    def __init__(self, read_mj: Callable[[], int]) -> None:
        self._read_mj = read_mj

    @classmethod
    def open(cls) -> NvmlCounter | None:
        """The counter over every visible NVIDIA GPU, or None without NVML or GPUs that have
        an energy counter."""
        reader = _pynvml_reader() or _libnvml_reader()
        if reader is None:
            return None
        try:
            reader()
        except EnergyCounterError:
            return None
        return cls(reader)

    def read_joules(self) -> float:
        return self._read_mj() / 1000.0


def _pynvml_reader() -> Callable[[], int] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return None
    if not handles:
        return None

    def read() -> int:
        try:
            return sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles)
        except pynvml.NVMLError as err:
            raise EnergyCounterError(f"NVML energy counter: {err}") from err

    return read


def _libnvml_reader() -> Callable[[], int] | None:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    count = ctypes.c_uint(0)
    if lib.nvmlInit_v2() != 0 or lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
        return None
    handles = []
    for i in range(count.value):
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
            return None
        handles.append(handle)
    if not handles:
        return None

    def read() -> int:
        total = 0
        for h in handles:
            mj = ctypes.c_ulonglong(0)
            code = lib.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(mj))
            if code != 0:
                raise EnergyCounterError(f"NVML energy counter: nvmlReturn_t {code}")
            total += mj.value
        return total

    return read


def open_counter(source: str = "auto", powercap_root: str = POWERCAP_ROOT) -> EnergyCounter | None:
    """The counter for source (see SOURCES); None means the power model. Asking for nvml or
    rapl where it cannot be read raises ValueError saying so."""
    if source not in SOURCES:
        raise ValueError(f"energy source must be one of {', '.join(SOURCES)}, got {source!r}")
    if source == "model":
        return None
    if source in ("auto", "nvml"):
        counter = NvmlCounter.open()
        if counter is not None or source == "nvml":
            if counter is None:
                raise ValueError(
                    "energy source nvml asked for, but no NVIDIA GPU with an "
                    "energy counter is visible through NVML"
                )
            return counter
    rapl = RaplCounter.open(powercap_root)
    if rapl is None and source == "rapl":
        raise ValueError(
            f"energy source rapl asked for, but no RAPL zone under "
            f"{powercap_root} is readable (energy_uj is usually root-only)"
        )
    return rapl


@dataclass(slots=True, frozen=True)
class EnergyReading:
    joules: float  # cumulative since the meter started
    watts: float  # mean power over the interval since the previous reading
    source: str  # nvml | rapl | model


class EnergyMeter:
    """Cumulative energy and interval power from a counter, or from the model when there is
    none. A counter that fails later hands over to the model for good (logged once), so a
    node keeps reporting; its samples then say `model`."""

    def __init__(
        self,
        counter: EnergyCounter | None,
        model: PowerModel,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self._clock = clock
        self._counter = counter
        self._last_t = clock()
        self._joules = 0.0
        self._last_raw = counter.read_joules() if counter is not None else 0.0

    @property
    def source(self) -> str:
        return self._counter.name if self._counter is not None else "model"

    def read(self, utilization: float) -> EnergyReading:
        """Energy up to now; utilization is the mean over the interval since the last read
        (used by the model only)."""
        now = self._clock()
        dt = max(now - self._last_t, 0.0)
        self._last_t = now
        if self._counter is not None:
            try:
                raw = self._counter.read_joules()
            except EnergyCounterError as err:
                log.warning("%s; modelling power from now on", err)
                self._counter = None
            else:
                delta = max(raw - self._last_raw, 0.0)
                self._last_raw = raw
                self._joules += delta
                return EnergyReading(self._joules, delta / dt if dt > 0 else 0.0, self.source)
        watts = self.model.watts(utilization)
        self._joules += watts * dt
        return EnergyReading(self._joules, watts, "model")
