"""How far each run of an attempt got before its worker died, and when to stop recovering it.

DBOS recovers an attempt whose worker stopped under it: at the next launch of a worker with the
same executor id, or when a live worker takes over a dead one. Each recovery runs the workflow
again from its last recorded step. An attempt that dies at the same step every time (a step
that runs out of memory, crashes in native code, or outlasts every drain) would be recovered
for ever, so remit counts: each recovery records the position it resumes at, which is where
the run before it stopped. A recovery that resumes further on than the one before made
progress, and the count starts again; `REMIT_MAX_RECOVERIES` recoveries in a row that got no
further fail the run before the next one runs anything, naming where each run stopped.

So an attempt killed at many different points, by redeploys or a flaky host, carries on; only
one that keeps dying at one point is given up.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.ledger import LedgerRow
from remit.core.schema import recoveries

# How many stops an attempt keeps at least (more when REMIT_MAX_RECOVERIES needs them to count):
# enough to show a pattern, bounded for an attempt recovered a great many times while getting
# further each time.
KEPT_STOPS = 50


class RecoveredTooOften(RemitError):
    """An attempt's worker died at the same point on `REMIT_MAX_RECOVERIES` recoveries in a row:
    the run fails with this message, nothing having run in the recovery that raised it."""


class Recoveries:
    """The positions each run of an attempt stopped at (table `remit_recoveries`)."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self.db = db
        self.clock = clock or SystemClock()

    def record(
        self, run_id: str, workflow_id: str, position: int, *, keep: int = KEPT_STOPS
    ) -> list[int]:
        """Note that a recovery of `workflow_id` resumes at `position`: where the run of the
        attempt before it stopped. Returns the last `keep` stops (at least `KEPT_STOPS`),
        oldest first."""
        keep = max(keep, KEPT_STOPS)

        def write() -> list[int]:
            now = self.clock.now()
            with self.db.begin() as conn:
                row = conn.execute(
                    sa.select(recoveries.c.stops)
                    .where(recoveries.c.workflow_id == workflow_id)
                    .with_for_update()
                ).first()
                if row is None:
                    stops = [position]
                    conn.execute(
                        recoveries.insert().values(
                            workflow_id=workflow_id, run_id=run_id, stops=stops, updated_at=now
                        )
                    )
                    return stops
                stops = [*row.stops, position][-keep:]
                conn.execute(
                    recoveries.update()
                    .where(recoveries.c.workflow_id == workflow_id)
                    .values(stops=stops, updated_at=now)
                )
                return stops

        def written() -> list[int]:
            try:
                return write()
            except sa.exc.IntegrityError:
                # Another process recorded the attempt's first stop meanwhile (no row was there
                # to lock): its row is there now, and this one is added to it.
                return write()

        return self.db.retrying(f"attempt {workflow_id}: its recovery", written)


def without_progress(stops: list[int]) -> int:
    """How many recoveries in a row, the latest last, got no further than the run before
    them. `stops[i]` is where the attempt's `i`th run stopped (the first run is 0): recovery
    `i` got further when `stops[i] > stops[i - 1]`."""
    count = 0
    for before, after in zip(reversed(stops[:-1]), reversed(stops[1:]), strict=True):
        if after > before:
            break
        count += 1
    return count


def where_it_stopped(
    workflow_id: str, rows: list[LedgerRow], steps: list[dict[str, Any]] | list[Any]
) -> str:
    """The step the attempt `workflow_id` was in when its worker died: the call its ledger
    holds in flight (`rows` are its run's), or else the position after its last finished step
    (`steps` are DBOS's steps of the attempt)."""
    attempt = int(workflow_id.rsplit(":", 1)[1])
    for row in reversed(rows):
        if row.attempt == attempt and row.status in ("started", "abandoned"):
            started: datetime = row.started_at
            return (
                f"step {row.step_id}, the call of `{row.op_id}` (key {row.idempotency_key}, "
                f"started {started:%Y-%m-%d %H:%M:%S} UTC)"
            )
    if not steps:
        return "its first step"
    last = max(steps, key=lambda step: step["function_id"])
    return f"step {last['function_id'] + 1}, the one after `{last['function_name']}`"


def too_often(workflow_id: str, stops: list[int], where: str, limit: int) -> RecoveredTooOften:
    """The error that fails a run whose attempt `workflow_id`'s runs stopped at `stops`."""
    stuck = without_progress(stops) + 1
    return RecoveredTooOften(
        f"attempt {workflow_id} was given up after its last {stuck} runs stopped at the same "
        f"point (REMIT_MAX_RECOVERIES is {limit}: recoveries in a row that get no further): "
        f"each time, its worker stopped before the attempt got past {where}. Where each run "
        f"of it stopped, oldest first: step {', '.join(str(stop) for stop in stops)}. Find "
        "why that step ends its process (memory, a crash in native code, a kill, or a shutdown "
        "whose drain it outlasts), then retry the run"
    )
