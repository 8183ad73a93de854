"""Markdown for the reports: cells as every report writes them, and whole tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MISSING = "-"


def pct(x: float | None) -> str:
    """0.123 -> 12.3%; nothing measured -> -."""
    return MISSING if x is None else f"{100 * x:.1f}%"


def ms(x: float | None) -> str:
    """Milliseconds, whole, with thousands separators; nothing measured -> -."""
    return MISSING if x is None else f"{x:,.0f}"


def cell(text: object) -> str:
    """Text that stays one cell: no pipes, no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """The table's lines: a header, the separator (align: one letter a column, "l" or "r";
    left where not given), one line a row."""
    marks = [("---:" if a == "r" else "---") for a in align.ljust(len(columns), "l")]
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join(marks) + "|",
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]
