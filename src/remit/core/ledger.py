"""The ledger: one row per op call, and what a re-entered call may do.

A call's row is `started` (durable) before its driver is called, and gets its outcome after
(`finish`): `ok` with the output, or `failed` with the `Failure` in `error_info` (see
`outcome.py`; `LedgerRow.outcome` reads it back typed).
A call that finds its own row already there is a re-entry (a step retried after a crash, or a
later attempt reaching the same step): `on_reentry` says what its status allows, and
`execution/reentry.py` decides from the whole row. A write whose outcome is unknown is
`uncertain` and waits for a person (`tasks.py`); their answer makes the row `ok` (it happened),
`not_done` (it did not, and the op is called again) or `failed`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from remit.core import fence
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database, count
from remit.core.outcome import Ok, Outcome, failed
from remit.core.schema import call_inputs, ledger, ledger_tries, runs

LedgerStatus = Literal["started", "ok", "failed", "uncertain", "not_done", "abandoned"]
Reentry = Literal["replay", "call", "uncertain"]


def on_reentry(status: str, *, safe_to_repeat: bool) -> Reentry:
    """What a call that finds its ledger row may do.

    - `replay`: the outcome is recorded (ok, failed or uncertain); return it, call nothing.
    - `call`: the earlier call may or may not have happened, and calling again with the same
      idempotency key cannot double its effect; or a person confirmed it did not happen
      (`not_done`); or it was a read whose attempt ended before it answered (`abandoned`).
    - `uncertain`: the earlier call may have happened and repeating it could double it.
    """
    if status in ("not_done", "abandoned"):
        return "call"
    if status != "started":
        return "replay"
    return "call" if safe_to_repeat else "uncertain"


def input_hash(payload: Any) -> str:
    """A stable hash of an op's JSON input (keys sorted)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class LedgerRow:
    id: int
    run_id: str
    attempt: int
    step_id: int
    op_id: str
    effect: str
    idempotent: bool
    idempotency_key: str
    input_hash: str
    status: str
    tries: int
    actor: str
    started_at: datetime
    finished_at: datetime | None
    output: Any
    error: str | None
    # The failure's JSON as stored; `outcome` reads it typed.
    error_info: dict[str, Any] | None
    cost: Decimal | None
    # The outcomes before this one, oldest first, when read with them (`LedgerStore.list`).
    earlier: tuple[EarlierTry, ...] = ()

    @property
    def outcome(self) -> Outcome:
        """What a finished row records, to return instead of calling again: `Ok` with the
        output, or `Failed` with the failure its `error_info` holds (a row of an earlier
        version without one fails as `failed`). The message is the `error` column's."""
        if self.status == "ok":
            return Ok(output=self.output)
        info = {**(self.error_info or {}), "message": self.error or "the call failed"}
        info.setdefault("kind", "failed")
        return failed(info)


@dataclass(frozen=True)
class EarlierTry:
    """An outcome of a call that its row no longer holds: a refused try, or what an earlier
    attempt left before the call was made again (`remit_ledger_tries`)."""

    run_id: str
    attempt: int
    actor: str
    try_number: int
    status: str
    error: str | None
    at: datetime

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "at": self.at.isoformat()}


@dataclass(frozen=True)
class CallRecord:
    """Who makes which call: the fields of a new ledger row."""

    run_id: str
    attempt: int
    step_id: int
    op_id: str
    effect: str
    idempotent: bool
    idempotency_key: str
    input_hash: str
    actor: str


@dataclass(frozen=True)
class Begun:
    """What `LedgerStore.begin` found: a new `started` row, the row already under the key, or
    a run that has moved on from the calling attempt (nothing written)."""

    existing: LedgerRow | None = None
    moved_on: bool = False


class LedgerStore:
    """Reads and writes of the ledger table."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self.db = db
        self.clock = clock or SystemClock()

    def begin(self, record: CallRecord, workflow_id: str | None, *, sent: Any = None) -> Begun:
        """Write a call's `started` row, durable when this returns, if its attempt is current
        (see `begin_in`)."""
        started_at = self.clock.now()

        def write() -> Begun:
            with self.db.begin() as conn:
                return self.begin_in(conn, record, workflow_id, sent=sent, started_at=started_at)

        try:
            return self.db.retrying(f"ledger {record.idempotency_key}: started", write)
        except sa.exc.IntegrityError:
            # Another process inserted the same key between our read and our insert.
            return Begun(existing=self.get(record.idempotency_key))

    def begin_in(
        self,
        conn: sa.Connection,
        record: CallRecord,
        workflow_id: str | None,
        *,
        sent: Any,
        started_at: datetime,
    ) -> Begun:
        """`begin` inside the caller's transaction (the one that checks the call's step has
        no checkpoint yet, see `checkpoint.py`): the `started` row, written as of `started_at`.

        In the same transaction it checks that the run is still running on `workflow_id`: an
        attempt that was superseded or cancelled starts no new write. A direct call (no
        `workflow_id`) belongs to no run and is not fenced. `sent`, if given, is kept as what
        the call was sent (`call_inputs`), for a task that may ask about it. The same
        `started_at` again finds the row it wrote (a transaction whose commit answer was lost).
        """
        row = {**record.__dict__, "status": "started", "tries": 0, "started_at": started_at}
        if workflow_id is not None and not self.db.is_sqlite:
            # The usual case in one statement: the run is current and the key is new.
            fenced = {**row, "fence_run": record.run_id, "fence_attempt": workflow_id}
            if conn.execute(_INSERT_IF_CURRENT, fenced).first() is not None:
                if sent is not None:
                    conn.execute(self._insert_new_input(record.idempotency_key, sent))
                return Begun()
            # Nothing written: the run moved on, or the key is taken. Told apart below.
        if workflow_id is not None and not _current(conn, record.run_id, workflow_id):
            return Begun(moved_on=True)
        if conn.execute(*self._insert_new(row)).first() is None:
            existing = self._by_key(conn, record.idempotency_key)
            assert existing is not None, "a ledger key that is taken has a row (none is deleted)"
            if not _ours(existing, record, started_at):
                return Begun(existing=existing)
        if sent is not None:
            conn.execute(self._insert_new_input(record.idempotency_key, sent))
        return Begun()

    def begin_read(self, record: CallRecord) -> Begun:
        """Write a read's `started` row in one statement, unfenced: a read cannot double
        anything, so it needs only to show while it is in flight. The row already under the
        key, if there is one, is given instead (nothing written)."""
        row = {**record.__dict__, "status": "started", "tries": 0, "started_at": self.clock.now()}
        statement, params = self._insert_new(row)
        if self.db.retrying(
            f"ledger {record.idempotency_key}: started",
            lambda: self.db.execute_one(statement, params),
        ):
            return Begun()
        existing = self.get(record.idempotency_key)
        assert existing is not None, "a ledger key that is taken has a row (none is deleted)"
        return Begun(existing=existing)

    def retake(self, record: CallRecord, existing: LedgerRow) -> None:
        """A re-entered call goes ahead: keep the outcome the row held (`existing`) among its
        earlier tries, note the run, attempt and step that make the call now (another run's,
        when a later apply settles an earlier one's create), and make the row `started` again,
        from now (a `not_done` row is called again)."""
        now = self.clock.now()
        statement = _taken_by(record).values(
            status="started", started_at=now, finished_at=None, error=None, error_info=None
        )

        def write() -> None:
            with self.db.begin() as conn:
                conn.execute(_kept(existing))
                conn.execute(statement)

        self.db.retrying(f"ledger {record.idempotency_key}: started again", write)

    def abandon(self, key: str, attempt: int) -> bool:
        """Mark a read (or an idempotent write) `started` in attempt `attempt`, which has ended,
        `abandoned`; False when
        the row is no longer so (it answered, or a later attempt called it again, meanwhile)."""
        statement = (
            ledger.update()
            .where(
                ledger.c.idempotency_key == key,
                ledger.c.status == "started",
                ledger.c.attempt == attempt,
            )
            .values(status="abandoned", finished_at=self.clock.now())
        )
        return bool(
            self.db.retrying(f"ledger {key}: abandoned", lambda: self.db.execute_one(statement))
        )

    def tried(self, record: CallRecord, tries: int, error: str) -> None:
        """Try number `tries` of the call failed with `error`, and it is tried again: the row
        counts its tries, and the refusal is kept among its earlier tries."""
        kept = ledger_tries.insert().values(
            idempotency_key=record.idempotency_key,
            run_id=record.run_id,
            attempt=record.attempt,
            actor=record.actor,
            try_number=tries,
            status="failed",
            error=error,
            at=self.clock.now(),
        )
        counted = (
            ledger.update()
            .where(ledger.c.idempotency_key == record.idempotency_key)
            .values(tries=tries)
        )

        def write() -> None:
            with self.db.begin() as conn:
                conn.execute(kept)
                conn.execute(counted)

        self.db.retrying(f"ledger {record.idempotency_key}: try {tries} failed", write)

    def finish(
        self,
        record: CallRecord,
        outcome: Outcome,
        *,
        tries: int,
        started_at: datetime | None = None,
        cost: Decimal | None = None,
    ) -> bool:
        """Record a call's outcome: its `started` row becomes `ok` or `failed` (a call whose
        row is gone gets one now). `cost` is what the call cost in USD, for an op with a cost.

        False when the idempotency key already belongs to another call (another op, or the
        same op with other input): nothing is written.
        """
        values, new_row = self._outcome(record, outcome, tries, started_at, cost)

        def write() -> bool:
            # One statement each, most often only the first: the outcome on the call's
            # `started` row. Each is checked, so none needs the others in its transaction.
            return self._write_outcome(self.db.execute_one, record, values, new_row)

        return self.db.retrying(f"ledger {record.idempotency_key}: {values['status']}", write)

    def finish_in(
        self,
        conn: sa.Connection,
        record: CallRecord,
        outcome: Outcome,
        *,
        tries: int,
        started_at: datetime | None = None,
        cost: Decimal | None = None,
    ) -> bool:
        """`finish`, inside the caller's transaction on `conn`: a call's cost settles its budget
        reservation in the transaction that records it (see `budgets.py`)."""
        values, new_row = self._outcome(record, outcome, tries, started_at, cost)
        return self._write_outcome(
            lambda statement, params: count(conn.execute(statement, params)),
            record,
            values,
            new_row,
        )

    def settle_read_in(
        self,
        conn: sa.Connection,
        record: CallRecord,
        outcome: Outcome,
        *,
        tries: int,
        started_at: datetime,
    ) -> LedgerRow | None:
        """A read's whole row, written once it has ended, inside the caller's transaction (its
        step's checkpoint), for a read that wrote no `started` row. A row already under the key
        of the same call (its step ran before) keeps what it held among its earlier tries, as
        `retake` does, and becomes this call's. Returns the row of another call that holds the
        key (another op, or other input), writing nothing; None once written."""
        values, new_row = self._outcome(record, outcome, tries, started_at, None)
        if conn.execute(*self._insert_new(new_row)).first() is not None:
            return None
        existing = read_row(conn, record.idempotency_key, for_update=True)
        assert existing is not None, "a ledger key that is taken has a row (none is deleted)"
        if (existing.op_id, existing.input_hash) != (record.op_id, record.input_hash):
            return existing
        conn.execute(_kept(existing))
        conn.execute(_taken_by(record).values(started_at=started_at, **values))
        return None

    def _outcome(
        self,
        record: CallRecord,
        outcome: Outcome,
        tries: int,
        started_at: datetime | None,
        cost: Decimal | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The values of a call's outcome, and the whole row when it has none yet."""
        now = self.clock.now()
        values: dict[str, Any] = {"tries": tries, "finished_at": now, "cost": cost}
        if isinstance(outcome, Ok):
            values |= {"status": "ok", "output": outcome.output, "error": None, "error_info": None}
        else:
            values |= {
                "status": "failed",
                "output": None,
                "error": outcome.message,
                "error_info": outcome.failure.model_dump(mode="json"),
            }
        return values, {**record.__dict__, **values, "started_at": started_at or now}

    def _write_outcome(
        self,
        execute: Callable[[sa.Executable, dict[str, Any]], int],
        record: CallRecord,
        values: dict[str, Any],
        new_row: dict[str, Any],
    ) -> bool:
        same_call = {
            "same_key": record.idempotency_key,
            "same_op": record.op_id,
            "same_hash": record.input_hash,
        }
        if execute(_OUTCOME_OF_SAME_CALL, {**values, **same_call}) == 1:
            return True
        return execute(*self._insert_new(new_row)) == 1

    def _insert_new(self, row: dict[str, Any]) -> tuple[sa.Insert, dict[str, Any]]:
        """An insert of `row` that does nothing when the key is taken, as a statement and its
        parameters."""
        return _INSERT_NEW["sqlite" if self.db.is_sqlite else "postgresql"], row

    def _insert_new_input(self, key: str, sent: Any) -> sa.Insert:
        """What the call keyed `key` was sent, unless a row holds it already (the same key is
        the same input: its hash is checked)."""
        insert = postgresql.insert if not self.db.is_sqlite else sqlite.insert
        return (
            insert(call_inputs)
            .values(idempotency_key=key, input=sent)
            .on_conflict_do_nothing(index_elements=["idempotency_key"])
        )

    def _update(self, key: str, values: dict[str, Any]) -> None:
        statement = ledger.update().where(ledger.c.idempotency_key == key).values(**values)
        self.db.retrying(f"ledger {key}", lambda: self.db.execute_one(statement))

    def get(self, key: str) -> LedgerRow | None:
        return self.db.read(f"ledger {key}", lambda conn: self._by_key(conn, key))

    def list(
        self,
        *,
        run_id: str | None = None,
        op_id: str | None = None,
        status: str | None = None,
        limit: int = 200,
        with_tries: bool = False,
        only: sa.ColumnElement[bool] | None = None,
    ) -> list[LedgerRow]:
        """Op calls: one run's in order (every one of them), or the latest `limit`, newest
        first; of one op and of one status when given. `with_tries`: each with its earlier
        tries (one more query). `only`: a further condition (what a principal may read)."""
        query = sa.select(ledger)
        if only is not None:
            query = query.where(only)
        if op_id is not None:
            query = query.where(ledger.c.op_id == op_id)
        if status is not None:
            query = query.where(ledger.c.status == status)
        if run_id is not None:
            query = query.where(ledger.c.run_id == run_id).order_by(ledger.c.id)
        else:
            query = query.order_by(ledger.c.id.desc()).limit(limit)
        with self.db.engine.connect() as conn:
            rows = [_row(row) for row in conn.execute(query)]
            if not with_tries or not rows:
                return rows
            earlier: dict[str, list[EarlierTry]] = {}
            keys = sorted({row.idempotency_key for row in rows})
            for at in range(0, len(keys), 500):
                for found in conn.execute(
                    sa.select(ledger_tries)
                    .where(ledger_tries.c.idempotency_key.in_(keys[at : at + 500]))
                    .order_by(ledger_tries.c.id)
                ):
                    earlier.setdefault(found.idempotency_key, []).append(
                        EarlierTry(
                            **{
                                name: found._mapping[name]
                                for name in EarlierTry.__dataclass_fields__
                            }
                        )
                    )
        return [replace(row, earlier=tuple(earlier.get(row.idempotency_key, ()))) for row in rows]

    def _by_key(self, conn: sa.Connection, key: str) -> LedgerRow | None:
        return read_row(conn, key)


def read_row(conn: sa.Connection, key: str, *, for_update: bool = False) -> LedgerRow | None:
    """The row under `key` inside the caller's transaction, locked till commit if asked."""
    query = sa.select(ledger).where(ledger.c.idempotency_key == key)
    row = conn.execute(query.with_for_update() if for_update else query).one_or_none()
    return None if row is None else _row(row)


# The ledger's hot statements are built once and run with parameters: building one (and its
# cache key) takes longer than a local server takes to run it. Their VALUES and SET clauses are
# the columns the parameters name.


def _insert_new_statement(insert: Callable[[sa.Table], Any]) -> sa.Insert:
    # The new row's id is returned: a driver's row count for such an insert is not always
    # told (psycopg's is -1), the rows it returns are.
    statement: sa.Insert = (
        insert(ledger)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
        .returning(ledger.c.id)
    )
    return statement


_INSERT_NEW = {
    "postgresql": _insert_new_statement(postgresql.insert),
    "sqlite": _insert_new_statement(sqlite.insert),
}

# A write's `started` row on Postgres, inserted only while its run is running on the calling
# attempt, whose row it locks (as `fence.lock` does) in the same statement: one round trip
# in the step's check where a lock and then an insert took two. No row comes back when the
# run has moved on or the key is taken.
_NEW_ROW_COLUMNS = [*CallRecord.__dataclass_fields__, "status", "tries", "started_at"]
_INSERT_IF_CURRENT = (
    postgresql.insert(ledger)
    .from_select(
        _NEW_ROW_COLUMNS,
        sa.select(*(sa.bindparam(name, type_=ledger.c[name].type) for name in _NEW_ROW_COLUMNS))
        .select_from(runs)
        .where(
            runs.c.run_id == sa.bindparam("fence_run"),
            runs.c.workflow_id == sa.bindparam("fence_attempt"),
            runs.c.status == "running",
        )
        .with_for_update(),
    )
    .on_conflict_do_nothing(index_elements=["idempotency_key"])
    .returning(ledger.c.id)
)

# A call's outcome on the row its own `started` wrote (same key, op and input).
_OUTCOME_OF_SAME_CALL = ledger.update().where(
    ledger.c.idempotency_key == sa.bindparam("same_key"),
    ledger.c.op_id == sa.bindparam("same_op"),
    ledger.c.input_hash == sa.bindparam("same_hash"),
)


def _kept(existing: LedgerRow) -> sa.Insert:
    """What a row held before a call under its key is made again: kept among its earlier tries."""
    return ledger_tries.insert().values(
        idempotency_key=existing.idempotency_key,
        run_id=existing.run_id,
        attempt=existing.attempt,
        actor=existing.actor,
        try_number=existing.tries,
        status=existing.status,
        error=existing.error,
        at=existing.finished_at or existing.started_at,
    )


def _taken_by(record: CallRecord) -> sa.Update:
    """The row under the call's key moved to the run, attempt and step that make it now."""
    return (
        ledger.update()
        .where(ledger.c.idempotency_key == record.idempotency_key)
        .values(
            run_id=record.run_id,
            step_id=record.step_id,
            attempt=record.attempt,
            actor=record.actor,
        )
    )


def _current(conn: sa.Connection, run_id: str, workflow_id: str) -> bool:
    """Whether the run is still running on attempt `workflow_id` (its row locked till commit)."""
    run = fence.lock(conn, run_id)
    return run is not None and run.on(workflow_id, ("running",))


def _ours(existing: LedgerRow, record: CallRecord, started_at: datetime) -> bool:
    """True when `existing` is the row this very `begin` wrote on an earlier try whose commit
    went through but whose answer was lost: the call has not been made yet."""
    return (existing.status, existing.attempt, existing.tries, existing.started_at) == (
        "started",
        record.attempt,
        0,
        started_at,
    )


def _row(row: sa.Row[Any]) -> LedgerRow:
    return LedgerRow(**{column.name: row._mapping[column.name] for column in ledger.columns})
