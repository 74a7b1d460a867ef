"""Drift findings: what `drift` found differs, one open row per difference.

A pass that finds the same difference as the open finding (the plan's fingerprint) only counts
itself on it, so a person is told once per drift, not once per pass. A pass that finds another
difference closes the old finding and opens one for the new; a pass that finds none closes what
is open. Opening one logs a warning on `remit.drift`, which the worker's log carries to whoever
watches it.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.schema import drift
from remit.resources.planner import Plan

log = logging.getLogger("remit.drift")


@dataclass(frozen=True)
class Finding:
    id: str
    fingerprint: str
    status: str
    summary: str
    changes: list[dict[str, Any]]
    run_id: str
    opened_at: datetime
    seen_at: datetime
    passes: int
    closed_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "opened_at": self.opened_at.isoformat(),
            "seen_at": self.seen_at.isoformat(),
            "closed_at": None if self.closed_at is None else self.closed_at.isoformat(),
        }


class Findings:
    """The drift findings of app `app`."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def record(self, plan: Plan, *, run_id: str) -> dict[str, Any]:
        """Record what a pass found; return `{"finding": id or None, "opened": bool}`."""
        now = self.clock.now()
        fingerprint = plan.fingerprint()

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                open_rows = conn.execute(
                    sa.select(drift.c.id, drift.c.fingerprint)
                    .where(drift.c.app == self.app, drift.c.status == "open")
                    .with_for_update()
                ).all()
                same = [
                    row.id
                    for row in open_rows
                    if plan.has_changes and row.fingerprint == fingerprint
                ]
                others = [row.id for row in open_rows if row.id not in same]
                if others:
                    conn.execute(
                        drift.update()
                        .where(drift.c.id.in_(others))
                        .values(status="closed", closed_at=now)
                    )
                if not plan.has_changes:
                    return {"finding": None, "opened": False, "closed": others}
                if same:
                    conn.execute(
                        drift.update()
                        .where(drift.c.id == same[0])
                        .values(seen_at=now, passes=drift.c.passes + 1)
                    )
                    return {"finding": same[0], "opened": False, "closed": others}
                finding = "drf_" + uuid.uuid4().hex[:16]
                conn.execute(
                    drift.insert().values(
                        id=finding,
                        app=self.app,
                        fingerprint=fingerprint,
                        status="open",
                        summary=plan.summary(),
                        changes=[c.as_json() for c in plan.pending],
                        run_id=run_id,
                        opened_at=now,
                        seen_at=now,
                        passes=1,
                    )
                )
                return {"finding": finding, "opened": True, "closed": others}

        recorded = self.db.retrying(f"app {self.app}: recording drift", write)
        if recorded["opened"]:
            names = ", ".join(c.name for c in plan.pending)
            log.warning(
                "drift in app %s: %s %s from the data files (%s); finding %s",
                self.app,
                names,
                "differs" if len(plan.pending) == 1 else "differ",
                plan.summary(),
                recorded["finding"],
            )
        return recorded

    def list(self, *, status: str | None = "open") -> list[Finding]:
        query = sa.select(drift).where(drift.c.app == self.app).order_by(drift.c.opened_at)
        if status is not None:
            query = query.where(drift.c.status == status)
        with self.db.engine.connect() as conn:
            return [
                Finding(
                    id=row.id,
                    fingerprint=row.fingerprint,
                    status=row.status,
                    summary=row.summary,
                    changes=list(row.changes),
                    run_id=row.run_id,
                    opened_at=row.opened_at,
                    seen_at=row.seen_at,
                    passes=row.passes,
                    closed_at=row.closed_at,
                )
                for row in conn.execute(query)
            ]
