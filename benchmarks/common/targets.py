"""A benchmark's targets: each declared once (a TARGETS constant in the benchmark's own module),
judged on what was measured, and printed with the result as one table.

    TARGETS = {"memory": Target("device KV memory vs device-only", ">=", 0.65, "{:.0%}", " less")}
    verdicts = [TARGETS["memory"].judge(saving, f"{saving:.1%} less (...)")]
    lines += target_table(verdicts)  # | target | wanted | measured | verdict |

A value exactly at its threshold meets it: float rounding (2.1 / 2.0 - 1 > 0.05) must not fail
it. A target with nothing measured fails and says so.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from benchmarks.common.tables import cell, table

EPS = 1e-9
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda v, t: v >= t - EPS,
    "<=": lambda v, t: v <= t + EPS,
    ">": operator.gt,
    "<": operator.lt,
    "==": lambda v, t: abs(v - t) <= EPS,
}
NOT_MEASURED = "not measured"


@dataclass(slots=True, frozen=True)
class Verdict:
    """One row of a target table: a target judged on one measurement."""

    name: str
    want: str
    measured: str
    passed: bool | None  # None: reported beside the targets, not judged
    value: float | None = None

    @property
    def verdict(self) -> str:
        return "-" if self.passed is None else "PASS" if self.passed else "FAIL"

    def line(self) -> str:
        """The one-line form a benchmark prints when it ends."""
        return f"{self.verdict}  {self.name}: {self.measured} (wanted {self.want})"


@dataclass(slots=True, frozen=True)
class Target:
    """`name`: what is measured; met when `value <op> threshold`. `fmt` prints the threshold
    (and a value with no text of its own); `unit` follows it in the wanted column (" less",
    " lower than dense"); `want` replaces the whole wanted text where a comparison reads badly."""

    name: str
    op: str  # ">=", "<=", ">", "<", "=="
    threshold: float
    fmt: str = "{:g}"
    unit: str = ""
    want: str = ""

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"{self.name}: comparison {self.op!r} is not one of {list(_OPS)}")

    @property
    def wanted(self) -> str:
        return self.want or f"{self.op} {self.fmt.format(self.threshold)}{self.unit}"

    def met(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return _OPS[self.op](value, self.threshold)

    def judge(
        self, value: float | None, measured: str | None = None, *, name: str | None = None
    ) -> Verdict:
        """The verdict on `value`; `measured` is how the report states it (by default the value
        in `fmt`), `name` the row's name where it says more than the target's (a context)."""
        if value is None or math.isnan(value):
            text = measured or NOT_MEASURED
        else:
            text = measured if measured is not None else self.fmt.format(value)
        return Verdict(name or self.name, self.wanted, text, self.met(value), value)


def reported(name: str, want: str, measured: str, value: float | None = None) -> Verdict:
    """A figure shown in the target table without a verdict."""
    return Verdict(name, want, measured, None, value)


def target_table(verdicts: Iterable[Verdict]) -> list[str]:
    """The markdown table: | target | wanted | measured | verdict |."""
    return table(
        ("target", "wanted", "measured", "verdict"),
        ((cell(v.name), cell(v.want), cell(v.measured), v.verdict) for v in verdicts),
    )


def all_met(verdicts: Iterable[Verdict]) -> bool:
    """Every judged verdict passed (rows reported without a verdict do not count)."""
    return all(v.passed for v in verdicts if v.passed is not None)
