"""SLA classes in SQL: the table every gateway and the metrics collector read.

The table starts empty; the first service to start seeds it once with the classes it was given
(strata.core.sla's defaults, or the STRATA_SLA_CLASSES spec its caller parsed). From then on the
table is the definition, changed through the Admin API (`strata tenants set-class`); the spec is
only the seed. Classes are added or changed, never removed: a tenant's class must stay known.
"""

from __future__ import annotations

import math

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from strata.core.sla import DEFAULT_CLASS, SlaClass, SlaTable
from strata.store.models import SlaClassRow

MAX_PRIORITY = 9  # the range strata.core.sla's spec syntax accepts after @


class InvalidSlaClassError(ValueError):
    """A class that cannot be stored; the message names the field and the accepted values."""


def sla_class_problem(sla: SlaClass) -> str | None:
    """Why sla cannot be stored (a sentence naming the field), or None."""
    if not sla.name.strip() or sla.name != sla.name.strip() or len(sla.name) > 64:
        return (
            f"an SLA class name must be 1 to 64 characters without surrounding spaces, "
            f"got {sla.name!r}"
        )
    if not 0 <= sla.priority <= MAX_PRIORITY:
        return (
            f"SLA class {sla.name!r}: priority must be an integer from 0 to {MAX_PRIORITY}, "
            f"got {sla.priority}"
        )
    for what, target in (("ttft_ms", sla.ttft_ms), ("tpot_ms", sla.tpot_ms)):
        if target is not None and not (math.isfinite(target) and target > 0):
            return (
                f"SLA class {sla.name!r}: {what} must be a positive number of milliseconds "
                f"or unset (not judged), got {target}"
            )
    return None


def _record(row: SlaClassRow) -> SlaClass:
    return SlaClass(row.name, row.ttft_ms, row.tpot_ms, row.priority)


async def list_sla_classes(session: AsyncSession) -> list[SlaClass]:
    """The stored classes, by descending priority then name."""
    rows = (
        (
            await session.execute(
                select(SlaClassRow).order_by(SlaClassRow.priority.desc(), SlaClassRow.name)
            )
        )
        .scalars()
        .all()
    )
    return [_record(r) for r in rows]


async def load_sla_table(session: AsyncSession, seed: SlaTable | None = None) -> SlaTable:
    """The classes in force: the stored ones, or `seed` (default: strata.core.sla's defaults)
    while the table is still empty."""
    stored = await list_sla_classes(session)
    if not stored:
        return seed if seed is not None else SlaTable()
    return SlaTable(stored, default=DEFAULT_CLASS)


async def seed_sla_classes(session: AsyncSession, table: SlaTable) -> bool:
    """Store table's classes if no class is stored yet; True if this call stored them.

    Several services start at once: a concurrent seeder's unique-name conflict leaves the
    table as the winner wrote it.
    """
    count = (await session.execute(select(func.count()).select_from(SlaClassRow))).scalar_one()
    if count:
        return False
    for sla in table.classes.values():
        session.add(
            SlaClassRow(
                name=sla.name, priority=sla.priority, ttft_ms=sla.ttft_ms, tpot_ms=sla.tpot_ms
            )
        )
    try:
        await session.commit()
    except IntegrityError:
        await session.rollback()
        return False
    return True


async def put_sla_class(
    session: AsyncSession, sla: SlaClass, seed: SlaTable | None = None
) -> SlaClass:
    """Add sla or replace the class of that name. An empty table is seeded first (with `seed`,
    default strata.core.sla's defaults), so the default class always exists.
    Raises InvalidSlaClassError naming the faulty field."""
    problem = sla_class_problem(sla)
    if problem is not None:
        raise InvalidSlaClassError(problem)
    await seed_sla_classes(session, seed if seed is not None else SlaTable())
    try:
        return await _upsert(session, sla)
    except IntegrityError:
        # Another writer inserted this name between our read and insert: update theirs.
        await session.rollback()
        return await _upsert(session, sla)


async def _upsert(session: AsyncSession, sla: SlaClass) -> SlaClass:
    row = (
        await session.execute(select(SlaClassRow).where(SlaClassRow.name == sla.name))
    ).scalar_one_or_none()
    if row is None:
        row = SlaClassRow(name=sla.name)
        session.add(row)
    row.priority, row.ttft_ms, row.tpot_ms = sla.priority, sla.ttft_ms, sla.tpot_ms
    await session.commit()
    return _record(row)
