"""Table definitions (SQLAlchemy 2 declarative, typed columns).

Times are integers since the Unix epoch (ms, or ns for spans as OTLP sends them) rather than
DATETIME columns: SQLite and PostgreSQL then store and compare them identically. Text that
arrives in spans has no length limit (plain VARCHAR): PostgreSQL enforces lengths and SQLite does
not, and a long model name must not fail a batch on one backend only.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    """A tenant and its scheduling policy (strata.core.tenant_policy.TenantPolicy).

    The policy columns came after the first schema: their server defaults let an older store gain
    them with its rows intact (an existing tenant reads as weight 1, no guarantee, no burst
    limit). rate_limit_rps NULL means the gateway's default rate.
    """

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    sla_class: Mapped[str] = mapped_column(String(64))
    created_unix_ms: Mapped[int] = mapped_column(BigInteger)
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1"))
    guaranteed_share: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    burst_share: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1"))
    rate_limit_rps: Mapped[float | None] = mapped_column(Float, nullable=True)


class SlaClassRow(Base):
    """An SLA class (strata.core.sla.SlaClass); a NULL target is not judged."""

    __tablename__ = "sla_classes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    priority: Mapped[int] = mapped_column(Integer)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    tpot_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


class ApiKey(Base):
    """An API key, stored only as the sha256 hex digest of its plaintext."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    created_unix_ms: Mapped[int] = mapped_column(BigInteger)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class Run(Base):
    """One evaluation run (a load replay, a benchmark): what was run, when, with which settings."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(64))
    started_unix_ms: Mapped[int] = mapped_column(BigInteger)
    finished_unix_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    params_json: Mapped[str] = mapped_column(Text, default="{}")
    # The replay client's own figures, kept so that the server's can be checked against them.
    client_summary_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The tenant whose key opened the run (NULL: the admin or the cluster): only it, and the
    # admin, see the run.
    tenant: Mapped[str | None] = mapped_column(String(128), nullable=True)


class Span(Base):
    __tablename__ = "spans"
    __table_args__ = (Index("ix_spans_trace_span", "trace_id", "span_id", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trace_id: Mapped[str] = mapped_column(String(32))
    span_id: Mapped[str] = mapped_column(String(16))
    parent_span_id: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String, index=True)
    service: Mapped[str] = mapped_column(String)
    start_unix_nano: Mapped[int] = mapped_column(BigInteger)
    end_unix_nano: Mapped[int] = mapped_column(BigInteger)
    attributes_json: Mapped[str] = mapped_column(Text)
    status_code: Mapped[int] = mapped_column(Integer)


class Request(Base):
    """One finished request, derived from the gateway's generate span.

    run_id names an evaluation run without a foreign key: it arrives in spans from other
    processes, and a span naming an unknown run must not fail the batch it came in.
    """

    __tablename__ = "requests"
    __table_args__ = (Index("ix_requests_tenant_start", "tenant", "start_unix_ms"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String, unique=True)
    trace_id: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str] = mapped_column(String)
    model: Mapped[str] = mapped_column(String)
    start_unix_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    tpot_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e_ms: Mapped[float] = mapped_column(Float)
    queue_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_p50_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_p95_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_p99_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    finish_reason: Mapped[str] = mapped_column(String)
    error_code: Mapped[str] = mapped_column(String)  # "" when the request succeeded
    status_code: Mapped[int] = mapped_column(Integer)  # OTLP span status: 0 unset, 1 ok, 2 error
    run_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)


class NodeSample(Base):
    """A node's utilization, memory and power at one instant; fields vary by hardware, so JSON.

    One sample per node and millisecond: a sampler that resends a batch after a lost reply
    stores it once.
    """

    __tablename__ = "node_samples"
    __table_args__ = (
        Index("ux_node_samples_node_ts", "node_id", "ts_unix_ms", unique=True),
        Index("ix_node_samples_ts", "ts_unix_ms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(String(128))
    ts_unix_ms: Mapped[int] = mapped_column(BigInteger)
    fields_json: Mapped[str] = mapped_column(Text)


class Placement(Base):
    """One replica of one model on one node, as decided by placement plan `version`."""

    __tablename__ = "placements"
    __table_args__ = (Index("ix_placements_version", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(256))
    node_id: Mapped[str] = mapped_column(String(128))
    replica_id: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(Text)
    created_unix_ms: Mapped[int] = mapped_column(BigInteger)
