"""`ctx.transaction`: a step's writes to the app's own tables, made exactly once.

An app often keeps tables of its own beside remit's (an invoice cache, a mapping of customer
ids), in the same database. A write to them from a plain `ctx.step` is at-least-once: a worker
that dies after the write but before DBOS records the step runs it again. `AppWrites.write`
runs the app's function on a connection inside one transaction that

1. holds the run's row (`fence.hold`): an attempt the run has moved on from, or a run that has
   finished, writes nothing;
2. looks for the step's own row in `remit_app_writes` (the run, the step's position, its
   name): found, the step ran to its commit before, and its recorded outcome is the answer,
   with nothing run again;
3. runs the function, then writes that row with the step's outcome, both committing together.

The step's DBOS checkpoint follows the commit; between the two, a kill leaves the row, which
the next attempt answers from. A function that raises rolls everything back and the run sees
`StepFailed`: nothing was written, so a retry runs it again.

The connection refuses statements that name remit's tables or DBOS's (`remit_*`, DBOS's
system tables, the `dbos` schema): a write there would go around the fence and the ledger. It
reads the statement's text, which catches a mistake; a hard boundary between the app's tables
and remit's is a database role of the app's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.fence import hold
from remit.core.runs import RunInfo
from remit.core.schema import app_writes

# DBOS's system tables, as it names them on SQLite (on Postgres they are in the `dbos` schema).
DBOS_TABLES = frozenset(
    {
        "application_versions",
        "dbos_migrations",
        "notifications",
        "operation_outputs",
        "queues",
        "streams",
        "workflow_events",
        "workflow_events_history",
        "workflow_input",
        "workflow_output",
        "workflow_schedules",
        "workflow_status",
    }
)

# A name right after a keyword that reads or writes a table: FROM, JOIN, INTO, UPDATE, TABLE,
# TRUNCATE, REFERENCES (ONLY may come between), quoted or not, with its schema if it has one.
_NAME = r'(?:"[^"]+"|[A-Za-z_][\w$]*)'
_TABLE_AFTER_KEYWORD = re.compile(
    rf"\b(?:from|join|into|update|table|truncate|references)\s+(?:only\s+)?"
    rf"({_NAME}(?:\s*\.\s*{_NAME})?)",
    re.IGNORECASE,
)
# remit's tables and DBOS's schema are refused wherever they are named.
_ALWAYS = re.compile(r'(?<![\w$])"?(remit_[\w$]+|dbos)"?\s*(?:\.|(?![\w$]))', re.IGNORECASE)
_STRING = re.compile(r"'(?:[^']|'')*'")


class TransactionRefused(RemitError):
    """`ctx.transaction` was asked for something it does not do: a statement on remit's or
    DBOS's own tables, or a transaction outside a run. Nothing was written."""


class AppWrites:
    """The transactions of `ctx.transaction`, on the app's database (remit's own)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def write(
        self,
        run: RunInfo,
        position: int,
        name: str,
        fn: Callable[[sa.Connection], Any],
        *,
        now: Callable[[], datetime],
        done: Callable[[Any], dict[str, Any]],
        failed: Callable[[Exception], dict[str, Any]],
    ) -> dict[str, Any]:
        """The body of the step at `position`: `fn` run once on a connection in one
        transaction with the step's row, its outcome (`done(value)`) returned, or the recorded
        one if it ran before. `fn` raising, or being refused, rolls back and returns
        `failed(error)`; a value that is no outcome (not JSON) rolls back too."""
        try:
            with self.db.begin() as conn:
                return self._once(conn, run, position, name, fn, now=now, done=done)
        except _RolledBack as back:
            return back.outcome
        except Exception as error:
            return failed(error)

    def _once(
        self,
        conn: sa.Connection,
        run: RunInfo,
        position: int,
        name: str,
        fn: Callable[[sa.Connection], Any],
        *,
        now: Callable[[], datetime],
        done: Callable[[Any], dict[str, Any]],
    ) -> dict[str, Any]:
        if run.direct:
            raise TransactionRefused(
                f"ctx.transaction `{name}` outside a run: only a run's step writes to the app's "
                "tables once (a direct call has no run to fence on)"
            )
        hold(conn, run.run_id, run.workflow_id)
        recorded = conn.execute(
            sa.select(app_writes.c.outcome).where(
                app_writes.c.run_id == run.run_id,
                app_writes.c.position == position,
                app_writes.c.name == name,
            )
        ).scalar_one_or_none()
        if recorded is not None:
            answer: dict[str, Any] = recorded
            return answer
        with _guarded(conn, name) as refusals:
            value = fn(conn)
        if refusals:
            raise refusals[0]  # the function went on past a refusal: nothing of it commits
        if not conn.in_transaction():
            raise TransactionRefused(
                f"ctx.transaction `{name}` ended its transaction itself (commit or rollback): "
                "return from the function to commit, raise to roll back"
            )
        outcome = done(value)
        if "ok" not in outcome:
            raise _RolledBack(outcome)
        conn.execute(
            app_writes.insert().values(
                run_id=run.run_id,
                position=position,
                name=name,
                workflow_id=run.workflow_id,
                outcome=outcome,
                at=now(),
            )
        )
        return outcome


class _RolledBack(Exception):
    """The function's value is no step outcome (not JSON, or too large): `outcome` says why,
    and the transaction rolls back."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        super().__init__("not a step outcome")
        self.outcome = outcome


@contextmanager
def _guarded(conn: sa.Connection, name: str) -> Iterator[list[TransactionRefused]]:
    """While the app's function runs: each statement it sends is refused if it names remit's
    tables or DBOS's. The refusals are kept too, so one the function caught still fails it."""
    refusals: list[TransactionRefused] = []

    def check(
        _conn: sa.Connection, _cursor: Any, statement: str, *_args: Any, **_kwargs: Any
    ) -> None:
        table = refused_table(statement)
        if table is not None:
            refusals.append(
                TransactionRefused(
                    f"ctx.transaction `{name}` names `{table}`, one of remit's or DBOS's own "
                    "tables: a step changes those through ctx (calls, approvals, collections), "
                    "never directly. Keep the app's tables under names of their own (not "
                    "remit_*)"
                )
            )
            raise refusals[-1]

    sa.event.listen(conn, "before_cursor_execute", check)
    try:
        yield refusals
    finally:
        sa.event.remove(conn, "before_cursor_execute", check)


def refused_table(statement: str) -> str | None:
    """The first of remit's or DBOS's tables `statement` names, or None."""
    text = _STRING.sub("''", statement)
    found = _ALWAYS.search(text)
    if found is not None:
        return found.group(1)
    for match in _TABLE_AFTER_KEYWORD.finditer(text):
        parts = [part.strip().strip('"') for part in match.group(1).split(".")]
        if parts[-1].lower() in DBOS_TABLES:
            return ".".join(parts)
    return None
