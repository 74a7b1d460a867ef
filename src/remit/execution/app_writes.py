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

# A table's name where a statement names a table: after FROM, JOIN, INTO, UPDATE, TABLE,
# TRUNCATE, REFERENCES or USING (ONLY may come between), quoted or not, with its schema if it
# has one; and each table of a FROM list (`FROM a x, b AS y`).
_NAME = r'(?:"[^"]+"|[A-Za-z_][\w$]*)'
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_TABLE = re.compile(
    rf"\b(?:from|join|into|update|table|truncate|references|using)\s+(?:only\s+)?"
    rf"({_QUALIFIED})",
    re.IGNORECASE,
)
_KEYWORD = (
    r"(?:where|join|inner|left|right|full|cross|natural|on|using|group|order|limit|offset|"
    r"union|returning|set|window|having|for|lateral)\b"
)
_ALIASED = rf"{_QUALIFIED}(?:\s+(?:as\s+)?(?!{_KEYWORD}){_NAME})?"
_FROM_LIST = re.compile(rf"\bfrom\s+({_ALIASED}(?:\s*,\s*{_ALIASED})+)", re.IGNORECASE)
# DBOS's schema on Postgres, wherever a name is qualified by it.
_DBOS_SCHEMA = re.compile(r'(?<![\w$])"?dbos"?\s*\.', re.IGNORECASE)
# A statement that ends or begins a transaction itself.
_TRANSACTION_CONTROL = re.compile(
    r"^\s*(?:commit|end|abort|begin|start\s+transaction|rollback(?!\s+to\b))\b", re.IGNORECASE
)
# What is no name: string literals and comments.
_NOT_NAMES = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)


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

        def attempt() -> dict[str, Any]:
            with self.db.begin() as conn:
                return self._once(conn, run, position, name, fn, now=now, done=done)

        try:
            # A busy SQLite file or a lost connection rolled it all back: tried again.
            return self.db.retrying(f"ctx.transaction `{name}`", attempt)
        except _RolledBack as back:
            return back.outcome
        except sa.exc.IntegrityError as error:
            # Another execution of the same step (DBOS runs an attempt twice at most briefly,
            # on a recovery) recorded first: this one's writes rolled back; its record answers.
            with self.db.engine.connect() as conn:
                recorded = _recorded(conn, run.run_id, position, name)
            return recorded if recorded is not None else failed(error)
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
        recorded = _recorded(conn, run.run_id, position, name)
        if recorded is not None:
            return recorded
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


def _recorded(conn: sa.Connection, run_id: str, position: int, name: str) -> dict[str, Any] | None:
    """The outcome the step at `position` recorded with its writes, if it committed."""
    recorded: dict[str, Any] | None = conn.execute(
        sa.select(app_writes.c.outcome).where(
            app_writes.c.run_id == run_id,
            app_writes.c.position == position,
            app_writes.c.name == name,
        )
    ).scalar_one_or_none()
    return recorded


class _RolledBack(Exception):
    """The function's value is no step outcome (not JSON, or too large): `outcome` says why,
    and the transaction rolls back."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        super().__init__("not a step outcome")
        self.outcome = outcome


@contextmanager
def _guarded(conn: sa.Connection, name: str) -> Iterator[list[TransactionRefused]]:
    """While the app's function runs: each statement it sends is refused if it names remit's
    tables or DBOS's, or ends the transaction, and so is a commit or rollback of the
    connection. The refusals are kept too, so one the function caught still fails it."""
    refusals: list[TransactionRefused] = []
    sqlite = conn.dialect.name == "sqlite"

    def refuse(message: str) -> None:
        refusals.append(TransactionRefused(f"ctx.transaction `{name}` {message}"))
        raise refusals[-1]

    def check(
        _conn: sa.Connection, _cursor: Any, statement: str, *_args: Any, **_kwargs: Any
    ) -> None:
        if _TRANSACTION_CONTROL.match(_NOT_NAMES.sub(" ", statement)):
            refuse(_ENDS_ITSELF)
        table = refused_table(statement, sqlite=sqlite)
        if table is not None:
            refuse(
                f"names `{table}`, one of remit's or DBOS's own tables: a step changes those "
                "through ctx (calls, approvals, collections), never directly. Keep the app's "
                "tables under names of their own (not remit_*)"
            )

    def ends(ending: sa.Connection) -> None:
        # Raised from inside the commit (or rollback): the connection is thrown away, so the
        # server rolls back what it had, and no pooled connection is left in a transaction.
        ending.invalidate()
        refuse(_ENDS_ITSELF)

    listened: list[tuple[str, Callable[..., None]]] = [
        ("before_cursor_execute", check),
        ("commit", ends),
        ("rollback", ends),
    ]
    for event, fn in listened:
        sa.event.listen(conn, event, fn)
    try:
        yield refusals
    finally:
        for event, fn in listened:
            sa.event.remove(conn, event, fn)


_ENDS_ITSELF = (
    "would end its transaction itself (a commit or rollback): return from the function to "
    "commit, raise to roll back"
)


def refused_table(statement: str, *, sqlite: bool) -> str | None:
    """The first of remit's or DBOS's tables `statement` names, or None: a table named
    `remit_*`, anything in DBOS's `dbos` schema (Postgres), or one of DBOS's tables (SQLite,
    where they have no schema of their own)."""
    text = _NOT_NAMES.sub("''", statement)
    if _DBOS_SCHEMA.search(text):
        return "dbos"
    named = [match.group(1) for match in _TABLE.finditer(text)]
    for listed in _FROM_LIST.finditer(text):
        named += [item.split()[0] for item in listed.group(1).split(",")]
    for name in named:
        parts = [part.strip().strip('"') for part in name.split(".")]
        table = parts[-1].lower()
        if table.startswith("remit_") or (sqlite and table in DBOS_TABLES):
            return ".".join(parts)
    return None
