"""SLA classes and their per-request targets: the one definition the reports (and any policy
that needs a class's targets) read.

A class names a time-to-first-token and a time-per-output-token target in milliseconds, and a
scheduling priority (higher runs first on a node and may preempt lower classes). A
request attains its class when it succeeded and its measured latencies are within the targets;
a target that is absent is not judged, so a class with neither is best-effort (every successful
request attains it). The targets are the P99 goals of the class: a class meets its SLA when
its requests' P99 TTFT and P99 TPOT are within them.

Defaults (override with a spec string, e.g. STRATA_SLA_CLASSES of the metrics collector):

    interactive   TTFT 500 ms    TPOT 100 ms    priority 2   chat, code completion
    standard      TTFT 2000 ms   TPOT 200 ms    priority 1   API traffic without a human waiting
    batch         best-effort                   priority 0   offline jobs

Spec syntax: comma-separated `name=TTFT_MS/TPOT_MS` or `name=best-effort`, each optionally
followed by `@PRIORITY`, for example `interactive=300/50@2,standard=2000/200,batch=best-effort`.
Without `@`, a class with targets gets priority 1 and a best-effort class 0. The spec replaces the
whole table, so
it must name the default class (standard). A tenant whose class is not in the table is judged
against the default class's targets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_CLASS = "standard"
BEST_EFFORT = "best-effort"


@dataclass(slots=True, frozen=True)
class SlaClass:
    name: str
    ttft_ms: float | None  # None: not judged
    tpot_ms: float | None
    priority: int = 0  # higher runs first on a node and may preempt lower classes

    @property
    def best_effort(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None

    def attained(self, failed: bool, ttft_ms: float | None, tpot_ms: float | None) -> bool:
        """Whether one request met this class's targets. A latency the request has no value
        for (the TPOT of a one-token answer) is not judged."""
        if failed:
            return False
        for target, value in ((self.ttft_ms, ttft_ms), (self.tpot_ms, tpot_ms)):
            if target is not None and value is not None and value > target:
                return False
        return True

    def spec(self) -> str:
        suffix = "" if self.priority == _default_priority(self.best_effort) else f"@{self.priority}"
        if self.best_effort:
            return f"{self.name}={BEST_EFFORT}{suffix}"
        return f"{self.name}={_target_text(self.ttft_ms)}/{_target_text(self.tpot_ms)}{suffix}"


def _default_priority(best_effort: bool) -> int:
    return 0 if best_effort else 1


def _target_text(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


DEFAULT_CLASSES = (
    SlaClass("interactive", 500.0, 100.0, 2),
    SlaClass("standard", 2000.0, 200.0, 1),
    SlaClass("batch", None, None, 0),
)


class SlaTable:
    """The classes in force; lookup never fails (unknown names get the default's targets)."""

    def __init__(
        self, classes: Iterable[SlaClass] = DEFAULT_CLASSES, default: str = DEFAULT_CLASS
    ) -> None:
        self.classes = {c.name: c for c in classes}
        if default not in self.classes:
            raise ValueError(
                f"the SLA classes must include the default class {default!r}, "
                f"got {', '.join(self.classes) or 'none'}"
            )
        self.default = default

    def lookup(self, name: str) -> SlaClass:
        known = self.classes.get(name)
        if known is not None:
            return known
        fallback = self.classes[self.default]
        return SlaClass(name, fallback.ttft_ms, fallback.tpot_ms, fallback.priority)

    def spec(self) -> str:
        return ",".join(c.spec() for c in self.classes.values())


def parse_classes(spec: str) -> SlaTable:
    """The table a spec string describes (see the module docstring); "" gives the defaults.
    Raises ValueError naming the faulty entry."""
    if not spec.strip():
        return SlaTable()
    classes: list[SlaClass] = []
    for entry in (e.strip() for e in spec.split(",")):
        name, sep, targets = entry.partition("=")
        name, targets = name.strip(), targets.strip()
        targets, at, priority_text = targets.partition("@")
        targets = targets.strip()
        if not sep or not name:
            raise ValueError(
                f"SLA class entry {entry!r} must look like name=TTFT_MS/TPOT_MS "
                f"or name={BEST_EFFORT}"
            )
        if any(c.name == name for c in classes):
            raise ValueError(f"SLA class {name!r} is defined twice")
        priority = (
            _priority(name, priority_text) if at else _default_priority(targets == BEST_EFFORT)
        )
        if targets == BEST_EFFORT:
            classes.append(SlaClass(name, None, None, priority))
            continue
        ttft, slash, tpot = targets.partition("/")
        if not slash:
            raise ValueError(
                f"SLA class {name!r}: targets must be TTFT_MS/TPOT_MS (use - for "
                f"no target) or {BEST_EFFORT}, got {targets!r}"
            )
        classes.append(
            SlaClass(name, _target(name, "TTFT", ttft), _target(name, "TPOT", tpot), priority)
        )
    return SlaTable(classes)


def _target(name: str, what: str, text: str) -> float | None:
    text = text.strip()
    if text == "-":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"SLA class {name!r}: the {what} target must be milliseconds or -, got {text!r}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"SLA class {name!r}: the {what} target must be a positive number of "
            f"milliseconds, got {text!r}"
        )
    return value


def _priority(name: str, text: str) -> int:
    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"SLA class {name!r}: the priority after @ must be an integer from 0 to 9, got {text!r}"
        ) from None
    if not 0 <= value <= 9:
        raise ValueError(
            f"SLA class {name!r}: the priority after @ must be an integer from 0 to 9, got {value}"
        )
    return value
