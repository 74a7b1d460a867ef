"""Records and what happened about them: the rows of `remit_activity`.

A run, an approval gate or a task may concern one of the business's records, named as a pair
`(type, id)`, e.g. `("invoice", "inv_1003")`. A run names its record when it is started (or
its workflow derives it from the input); a gate names its own or concerns its run's; a task
concerns its run's. For each such thing one activity row is written in the transaction that
does it: the run's start, each retry and its end, the gate's opening and decision, the task's
opening and answer, the record's archiving. Nothing is written about what concerns no record.

The row of a run's start (`run.started`) and of a gate's opening (`approval.opened`) is also
where the record that run or gate concerns is kept: a later row about the same run or gate
reads the record from there (`record_of_run`, `record_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.errors import InputInvalid
from remit.core.schema import activity, runs
from remit.core.text import printable, unsafe

# A record as the business names it: (type, id), e.g. ("invoice", "inv_1003").
Record = tuple[str, str]

RUN_STARTED = "run.started"
RUN_RETRIED = "run.retried"
APPROVAL_OPENED = "approval.opened"
TASK_OPENED = "task.opened"
RECORD_ARCHIVED = "record.archived"
# Who ends a run that finishes on its own, done or failed.
RUN_ACTOR = "remit:run"

LONGEST_TYPE = 100
LONGEST_ID = 200
_EXAMPLE = "('invoice', 'inv_1003')"


@dataclass(frozen=True)
class RecordRef:
    """A record of one app: the app's name and the record's type and id."""

    app: str
    record_type: str
    record_id: str

    @property
    def record(self) -> Record:
        return (self.record_type, self.record_id)


def check_record(record: object, *, where: str) -> Record:
    """`record` as a `(type, id)` pair, or `InputInvalid` saying what to change.

    The type is 1 to 100 characters, the id 1 to 200, neither blank nor holding control
    characters. `where` names what was given it, e.g. `start(record=...)`.
    """
    if (
        not isinstance(record, tuple | list)
        or len(record) != 2
        or not all(isinstance(part, str) for part in record)
    ):
        shown = printable(repr(record))[:300]
        raise InputInvalid(
            f"{where}: the record {shown} is not a (type, id) pair of strings: name it as "
            f"{_EXAMPLE}",
            target=where,
            errors=[],
        )
    record_type, record_id = record
    problems = [
        problem
        for problem in (
            _part_problem("type", record_type, LONGEST_TYPE),
            _part_problem("id", record_id, LONGEST_ID),
        )
        if problem is not None
    ]
    if problems:
        shown = printable(repr((record_type[:120], record_id[:220])))
        raise InputInvalid(
            f"{where}: the record {shown}: {'; '.join(problems)}. Name it as {_EXAMPLE}",
            target=where,
            errors=[],
        )
    return (record_type, record_id)


def _part_problem(what: str, value: str, longest: int) -> str | None:
    if not value.strip():
        return f"its {what} is empty: give the record's {what}"
    if len(value) > longest:
        return f"its {what} is {len(value)} characters long: give one of at most {longest}"
    if unsafe(value):
        return f"its {what} holds control characters: give it without them"
    return None


def activity_row(
    conn: sa.Connection,
    ref: RecordRef,
    *,
    at: datetime,
    kind: str,
    actor: str,
    summary: str,
    run_id: str | None = None,
    target: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> None:
    """Write one activity row about `ref` in the caller's transaction, the one that did what it
    says."""
    conn.execute(
        activity.insert().values(
            app=ref.app,
            record_type=ref.record_type,
            record_id=ref.record_id,
            at=at,
            kind=kind,
            actor=actor,
            run_id=run_id,
            target=target,
            summary=summary,
            meta=dict(meta or {}),
        )
    )


def record_of_run(conn: sa.Connection, run_id: str) -> RecordRef | None:
    """The record the run concerns (named when it was started), or None."""
    return _first(conn, activity.c.run_id == run_id, RUN_STARTED)


def record_of_run_columns(run_id: str | sa.BindParameter[Any]) -> tuple[sa.Label[Any], ...]:
    """`record_of_run` as three scalar subqueries (app, record type, record id), for a
    statement about the run to return beside its own columns: `ref_of` reads them back.
    `run_id`: the run's id, or the parameter that gives it."""
    return tuple(
        sa.select(column)
        .where(activity.c.run_id == run_id, activity.c.kind == RUN_STARTED)
        .order_by(activity.c.id)
        .limit(1)
        .scalar_subquery()
        .label(f"record_{name}")
        for name, column in (
            ("app", activity.c.app),
            ("type", activity.c.record_type),
            ("id", activity.c.record_id),
        )
    )


def ref_of(row: sa.Row[Any]) -> RecordRef | None:
    """The record `record_of_run_columns` found in `row`, or None."""
    if row.record_type is None:
        return None
    return RecordRef(row.record_app, row.record_type, row.record_id)


def record_of(conn: sa.Connection, target: str, kind: str) -> RecordRef | None:
    """The record an approval or task concerns, as the row of its opening (`kind`) names it,
    or None."""
    return _first(conn, activity.c.target == target, kind)


def runs_of_record(app: str | None, record: Record) -> sa.Select[tuple[str | None]]:
    """The ids of the runs that concern `record` (of the app `app`; of any app: None), as a
    subquery."""
    kind, ident = record
    query = sa.select(activity.c.run_id).where(
        activity.c.record_type == kind,
        activity.c.record_id == ident,
        activity.c.kind == RUN_STARTED,
    )
    return query if app is None else query.where(activity.c.app == app)


def _first(conn: sa.Connection, where: sa.ColumnElement[bool], kind: str) -> RecordRef | None:
    row = conn.execute(
        sa.select(activity.c.app, activity.c.record_type, activity.c.record_id)
        .where(where, activity.c.kind == kind)
        .order_by(activity.c.id)
        .limit(1)
    ).one_or_none()
    return None if row is None else RecordRef(row.app, row.record_type, row.record_id)


def run_ended(
    conn: sa.Connection,
    run_id: str,
    status: str,
    *,
    at: datetime,
    actor: str = RUN_ACTOR,
    error: str | None = None,
    ref: RecordRef | None = None,
) -> None:
    """Write the activity row of the run's end (`run.done`, `run.failed`, `run.cancelled`) in
    the caller's transaction, the one that ended it, if the run concerns a record (`ref`, else
    looked up)."""
    ref = ref or record_of_run(conn, run_id)
    if ref is None:
        return
    workflow = conn.execute(sa.select(runs.c.workflow).where(runs.c.run_id == run_id)).scalar()
    summary = f"{workflow} {status}"
    if error:
        first = error.splitlines()[0] if error.splitlines() else error
        summary += f": {first[:300]}"
    activity_row(
        conn,
        ref,
        at=at,
        kind=f"run.{status}",
        actor=actor,
        summary=summary,
        run_id=run_id,
        meta={"workflow": workflow, "error": error},
    )
