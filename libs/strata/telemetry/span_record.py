"""A span as the evaluation pipeline sees it: what the OTLP receiver decodes and the store keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SpanRecord:
    """One span as the store keeps it: ids as lowercase hex, times in Unix nanoseconds."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    start_unix_nano: int
    end_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0

    def attributes_json(self) -> str:
        return json.dumps(self.attributes, sort_keys=True, separators=(",", ":"))
