"""Request sizes from an Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`).

Only the two length columns are read: callers that need sizes but draw their own arrival process
(a Poisson sweep, a benchmark) should not depend on the timestamp format. A malformed row fails
with the file name and line number, so a truncated download is noticed instead of skewing a run.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import SupportsInt

PROMPT_COLUMN = "ContextTokens"
OUTPUT_COLUMN = "GeneratedTokens"


@dataclass(slots=True, frozen=True)
class RequestLengths:
    prompt_tokens: int
    output_tokens: int


def read_azure_lengths(
    path: str | os.PathLike[str], limit: int | None = None
) -> list[RequestLengths]:
    """The (prompt, output) token counts of the first `limit` rows (all rows when None)."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be non-negative, got {limit}")
    rows: list[RequestLengths] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in (PROMPT_COLUMN, OUTPUT_COLUMN) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: the header lacks {', '.join(missing)}; an Azure LLM "
                f"inference trace has TIMESTAMP,{PROMPT_COLUMN},{OUTPUT_COLUMN}"
            )
        for row in reader:
            if limit is not None and len(rows) >= limit:
                break
            rows.append(
                RequestLengths(
                    token_count(path, reader.line_num, PROMPT_COLUMN, row.get(PROMPT_COLUMN)),
                    token_count(path, reader.line_num, OUTPUT_COLUMN, row.get(OUTPUT_COLUMN)),
                )
            )
    return rows


def token_count(path: str | os.PathLike[str], line: int, column: str, raw: object) -> int:
    """A non-negative integer field of a trace row; ValueError names the file, line and column.

    Shared by every trace reader (strata.eval.traces), so all formats fail the same way.
    """
    try:
        # JSON traces hand over numbers: 12.0 is a count, 12.5 and true are not.
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
        if not isinstance(raw, (str, SupportsInt)):
            raise TypeError
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{path}, line {line}: {column} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{path}, line {line}: {column} must be non-negative, got {value}")
    return value
