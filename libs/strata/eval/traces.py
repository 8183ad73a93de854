"""Readers of public LLM-serving trace formats, into one list of requests a replay can send.

    azure     CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure LLM inference traces 2023/2024);
              TIMESTAMP is `YYYY-MM-DD HH:MM:SS.fffffff`, 7 decimals, no time zone
    burstgpt  CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`;
              Timestamp is seconds from the trace start. A row with 0 response tokens is a failed
              request in the source: it is skipped and counted, not replayed as a 0-token request
    mooncake  JSONL `{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`;
              one hash id per 512-token prompt block, equal ids = a shared prefix block

Every reader returns arrivals relative to the earliest request (so the first is at 0.0) in arrival
order (a stable sort, so rows with equal timestamps keep their file order). Azure timestamps are
parsed to integer nanoseconds before subtracting, so 7-decimal stamps lose nothing to float
rounding. A malformed row raises ValueError naming the file and the line.
"""

from __future__ import annotations

import calendar
import csv
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar

from strata.eval.trace_lengths import OUTPUT_COLUMN, PROMPT_COLUMN, token_count

AZURE_TIME_COLUMN = "TIMESTAMP"
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(slots=True, frozen=True)
class TraceRequest:
    """One request of a trace. tenant, model and sla_class are "" when the format has none."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    tenant: str = ""
    model: str = ""
    sla_class: str = ""


@dataclass(slots=True)
class Trace:
    """What a reader found: the requests, and the source rows it left out (failures)."""

    format: str
    path: str
    requests: list[TraceRequest]
    skipped_failures: int = 0


PathLike = str | os.PathLike[str]


def read_azure(path: PathLike, limit: int | None = None) -> Trace:
    _check_limit(limit)
    stamped: list[tuple[int, TraceRequest]] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        _require_columns(
            path,
            reader.fieldnames,
            (AZURE_TIME_COLUMN, PROMPT_COLUMN, OUTPUT_COLUMN),
            "an Azure LLM inference",
        )
        for row in reader:
            if limit is not None and len(stamped) >= limit:
                break
            line = reader.line_num
            stamped.append(
                (
                    _azure_ns(path, line, row[AZURE_TIME_COLUMN]),
                    TraceRequest(
                        0.0,
                        token_count(path, line, PROMPT_COLUMN, row[PROMPT_COLUMN]),
                        token_count(path, line, OUTPUT_COLUMN, row[OUTPUT_COLUMN]),
                    ),
                )
            )
    return Trace("azure", os.fspath(path), _relative(stamped, 1e9))


def read_burstgpt(path: PathLike, limit: int | None = None) -> Trace:
    _check_limit(limit)
    stamped: list[tuple[float, TraceRequest]] = []
    failures = 0
    with open(path, newline="", encoding="utf-8") as f:
        # BurstGPT's published header has no spaces after the commas; copies edited by hand
        # (and the column list as usually quoted) do, so both are accepted.
        reader = csv.DictReader(f, skipinitialspace=True)
        if reader.fieldnames:
            reader.fieldnames = [name.strip() for name in reader.fieldnames]
        _require_columns(path, reader.fieldnames, BURSTGPT_COLUMNS, "a BurstGPT")
        for row in reader:
            if limit is not None and len(stamped) >= limit:
                break
            line = reader.line_num
            arrival = _seconds(path, line, "Timestamp", row["Timestamp"])
            prompt = token_count(path, line, "Request tokens", row["Request tokens"])
            output = token_count(path, line, "Response tokens", row["Response tokens"])
            if output == 0:
                failures += 1
                continue
            stamped.append(
                (arrival, TraceRequest(0.0, prompt, output, model=(row["Model"] or "").strip()))
            )
    return Trace("burstgpt", os.fspath(path), _relative(stamped, 1.0), skipped_failures=failures)


def read_mooncake(path: PathLike, limit: int | None = None) -> Trace:
    _check_limit(limit)
    stamped: list[tuple[float, TraceRequest]] = []
    with open(path, encoding="utf-8") as f:
        for line, text in enumerate(f, start=1):
            if limit is not None and len(stamped) >= limit:
                break
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {line}: not a JSON object ({err.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(
                    f"{path}, line {line}: expected a JSON object, got {type(obj).__name__}"
                )
            missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
            if missing:
                raise ValueError(
                    f"{path}, line {line}: missing {', '.join(missing)}; a Mooncake "
                    f"trace line has timestamp, input_length, output_length, "
                    f"hash_ids"
                )
            stamped.append(
                (
                    _seconds(path, line, "timestamp", obj["timestamp"]),
                    TraceRequest(
                        0.0,
                        token_count(path, line, "input_length", obj["input_length"]),
                        token_count(path, line, "output_length", obj["output_length"]),
                        hash_ids=_hash_ids(path, line, obj.get("hash_ids", [])),
                    ),
                )
            )
    return Trace("mooncake", os.fspath(path), _relative(stamped, 1000.0))


READERS: dict[str, Callable[[PathLike, int | None], Trace]] = {
    "azure": read_azure,
    "burstgpt": read_burstgpt,
    "mooncake": read_mooncake,
}
FORMATS = tuple(READERS)


def read_trace(path: PathLike, fmt: str, limit: int | None = None) -> Trace:
    """The first `limit` requests (all when None) of the trace file `path` in format `fmt`."""
    if fmt not in READERS:
        raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    return READERS[fmt](path, limit)


_Stamp = TypeVar("_Stamp", int, float)


def _relative(stamped: list[tuple[_Stamp, TraceRequest]], per_second: float) -> list[TraceRequest]:
    """The requests in stamp order (stamped is sorted in place), each arrival_s set to its
    stamp's distance from the first in seconds (per_second: stamp units per second)."""
    if not stamped:
        return []
    stamped.sort(key=lambda pair: pair[0])
    first = stamped[0][0]
    return [replace(request, arrival_s=(stamp - first) / per_second) for stamp, request in stamped]


def _azure_ns(path: PathLike, line: int, raw: str | None) -> int:
    whole, _, fraction = (raw or "").strip().partition(".")
    try:
        if len(fraction) > 9 or (fraction and not fraction.isdigit()):
            raise ValueError
        moment = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(
            f"{path}, line {line}: {AZURE_TIME_COLUMN} must look like "
            f"2023-11-16 18:15:46.6805900, got {raw!r}"
        ) from None
    return calendar.timegm(moment.timetuple()) * 10**9 + int(fraction.ljust(9, "0") or 0)


def _seconds(path: PathLike, line: int, column: str, raw: object) -> float:
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{path}, line {line}: {column} must be a number, got {raw!r}") from None
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(
            f"{path}, line {line}: {column} must be a finite non-negative number, got {raw!r}"
        )
    return value


def _hash_ids(path: PathLike, line: int, raw: object) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in raw
    ):
        raise ValueError(
            f"{path}, line {line}: hash_ids must be a list of integers, got {raw!r:.80}"
        )
    return tuple(raw)


def _require_columns(
    path: PathLike, header: Sequence[str] | None, columns: tuple[str, ...], kind: str
) -> None:
    missing = [c for c in columns if c not in (header or [])]
    if missing:
        raise ValueError(
            f"{path}: the header lacks {', '.join(missing)}; {kind} trace has {','.join(columns)}"
        )


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be non-negative, got {limit}")
