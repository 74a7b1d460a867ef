"""A record's timeline: everything that happened about one of the business's records.

Runs, approval gates and tasks may name the record they concern (`("invoice", "inv_1003")`);
each start and end of such a run, each opening and decision of such a gate, each opening and
answer of such a task, and each archiving of the record is one activity row, written in the
transaction that did it (`core/activity.py` writes them). `timeline` reads a record's rows,
oldest first, as `Activity` values; `remit activity TYPE ID` prints them, and
`client.records.activity` returns them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.activity import Record, check_record
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.schema import activity
from remit.people.answers import as_json

# The most rows one read returns.
MOST = 1000
# The last row number there can be: the id column is a 32-bit integer on Postgres.
LAST_ROW = 2**31 - 1


@dataclass(frozen=True)
class Activity:
    """One thing that happened about a record.

    `kind` says what: `run.started`, `run.done`, `run.failed`, `run.cancelled`,
    `approval.opened`, `approval.approved` (`rejected`, `expired`, `cancelled`), or
    `approval.withdrawn` (whoever asked for the gate took it back),
    `task.opened`, `task.done`, `task.not_done` or `record.archived`. `actor` is who did it
    (`remit:run` for a run that ended on its own, `remit:ledger` for a write whose outcome
    became unknown); `run_id` the run it happened in, `target` the approval or task it is
    about, `summary` a line saying what happened, and `meta` its details.
    """

    id: int
    app: str
    record_type: str
    record_id: str
    at: datetime
    kind: str
    actor: str
    run_id: str | None
    target: str | None
    summary: str
    meta: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The row as JSON, its time in ISO 8601."""
        return as_json({f.name: getattr(self, f.name) for f in fields(self)})


def timeline(
    db: Database,
    app: str,
    record: Record,
    *,
    limit: int = 100,
    after: int | None = None,
    only: sa.ColumnElement[bool] | None = None,
) -> list[Activity]:
    """The activity of the record `record` (`(type, id)`) of the app `app`, oldest first: at
    most `limit` rows, those after the row `after` (an `Activity.id`) when it is given, to read
    on from the last row of the page before. A record nothing happened about has none.

    Raises `InputInvalid` for a record no one could name, and `RemitError` for a limit that
    is not 1 to 1000 or an `after` that is no row number.
    """
    record_type, record_id = check_record(record, where="activity")
    if not 1 <= limit <= MOST:
        raise RemitError(f"activity: limit {limit} must be 1 to {MOST}")
    if after is not None and not 0 <= after <= LAST_ROW:
        raise RemitError(
            f"activity: after {after} is no row number: give 0 to {LAST_ROW}, the `#` of the "
            "last row read"
        )
    query = (
        sa.select(activity)
        .where(
            activity.c.app == app,
            activity.c.record_type == record_type,
            activity.c.record_id == record_id,
        )
        .order_by(activity.c.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(activity.c.id > after)
    if only is not None:
        query = query.where(only)  # what a principal may read (`remit.reads`)
    with db.engine.connect() as conn:
        return [_activity(row) for row in conn.execute(query)]


def _activity(row: sa.Row[Any]) -> Activity:
    return Activity(**{f.name: row._mapping[f.name] for f in fields(Activity)})
