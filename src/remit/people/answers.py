"""Answers: the one transaction in which a person's answer reaches a run that waits on it.

A run waits on two things a person answers: an approval gate (`Approvals.decide`) and a task
about a write whose outcome is unknown (`Tasks.resolve`). Each kind of answer says what it
locks, refuses and writes (an `Answer`); `Answers._give` runs it, the same for both, in one
transaction that

1. refuses a key sent before with another request (`core/keys.py`), and returns the first
   answer given under the same key, if there is one, writing and resuming nothing again;
2. locks the runs the answer concerns (`fence.lock_all`), then the kind's own rows: the run
   always first, as a gate's step, a task's opening and a wake take it too;
3. looks for the first answer under the key again, since one may have committed meanwhile;
4. refuses with every reason, refusals by policy among them, having written nothing; or
   writes the answer and its audit rows, and moves each run that waits on it on to its next
   attempt with an outbox row (`Turn.resume`, through `fence.advance`).

After the commit the new attempts are forked from their outbox rows. The policy refusals of a
refused answer are recorded once its transaction has rolled back. A run moves on only from the
attempt its lock read, and once per answer: the fence refuses anything else.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import sqlalchemy as sa

from remit.core.audit import audit_of
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.fence import LockedRun, advance, lock_all
from remit.core.keys import check_reuse, record_use
from remit.core.outbox import Resume, Resumer
from remit.policy.refusals import PolicyChecks

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.policy.guard import Guard

L = TypeVar("L")
R = TypeVar("R")


@dataclass(frozen=True)
class Replayed(Generic[R]):
    """The first answer given under a key: what it returned, and the attempts it resumed
    (their forks are made now if the outbox still holds them)."""

    result: R
    resumed: list[str]


@dataclass
class Turn:
    """One try of an answer's transaction, as the kind's `give` sees it: the connection, the
    time, the runs the answer concerns (locked; one that does not exist is left out), and the
    policy checks."""

    conn: sa.Connection
    now: datetime
    runs: Mapping[str, LockedRun]
    policy: PolicyChecks
    resumes: list[Resume] = field(default_factory=list)

    def resume(self, run: LockedRun, from_step: int) -> Resume:
        """Move the locked run on to its next attempt, to be forked after the commit from its
        current one at step `from_step`."""
        resume = advance(self.conn, run, from_step, now=self.now)
        self.resumes.append(resume)
        return resume


@dataclass(frozen=True)
class KeyedRequest:
    """An answer's request as its key names it: a key sent again with another `body` is
    refused. `scope` keeps kinds of keys apart; `what` names the key in the refusal;
    `summary` says what the request did, for the refusal of another under its key."""

    scope: str
    key: str
    what: str
    body: Mapping[str, Any]
    summary: str


class Answer(ABC, Generic[L, R]):
    """One kind of answer's part of the transaction: `L` is what it locks, `R` what it
    returns. Each step runs inside the transaction; `give` runs once per try of it."""

    @abstractmethod
    def run_ids(self, conn: sa.Connection) -> Iterable[str]:
        """The runs the answer concerns, read before any lock: an approval or a task never
        changes its run."""

    @abstractmethod
    def lock(self, conn: sa.Connection) -> L:
        """Lock the answer's own rows, in id order; its runs are locked already."""

    @abstractmethod
    def replay(self, conn: sa.Connection) -> Replayed[R] | None:
        """The first answer given under the same key, or None. Raises the kind's refusal when
        the key was given with another answer."""

    def keyed(self) -> KeyedRequest | None:
        """The request under its key, or None when it was given without one."""
        return None

    @abstractmethod
    def give(self, turn: Turn, locked: L) -> R:
        """Raise the kind's refusal with every reason, asking `turn.policy` among them; or
        write the answer with its audit rows, resuming each run that waits on it with
        `turn.resume`."""


class Answers:
    """What the answering sides (`Approvals`, `Tasks`) share: the transaction an answer is
    given in, forking what it resumed, and reading the rows answered. Usable from any process:
    answering needs no worker there, only the database."""

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        *,
        guard: Guard | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        # The app's policies: who may answer what (None: not checked).
        self.guard = guard
        self.clock = clock or SystemClock()
        self.resumer = Resumer(db, client, clock=self.clock)

    def audit(self, target: str) -> builtins.list[dict[str, Any]]:
        """The audit rows of one approval or task, oldest first."""
        return audit_of(self.db, target)

    def _give(self, what: str, answer: Answer[Any, R]) -> R:
        """Give `answer` in its transaction (tried again on a lost connection or a busy
        database, and when an answer under the same key committed first), record the policy
        refusals of a refused one, and fork the attempts it resumed."""
        policy = PolicyChecks(self.guard)
        for tries_left in (2, 1, 0):
            try:
                result, to_fork = self.db.retrying(what, lambda: self._once(what, answer, policy))
                break
            except sa.exc.IntegrityError:
                # Another answer under this key committed first: the next try replays it.
                if tries_left == 0:
                    raise
            except Exception:
                policy.record()
                raise
        self.resumer.fork_all(to_fork)
        return result

    def _once(
        self, what: str, answer: Answer[L, R], policy: PolicyChecks
    ) -> tuple[R, builtins.list[Resume]]:
        policy.clear()
        now = self.clock.now()
        keyed = answer.keyed()

        def first_answer(conn: sa.Connection) -> Replayed[R] | None:
            """The first answer under the key, if it was this request; refused if another."""
            if keyed is not None:
                check_reuse(conn, keyed.scope, keyed.key, keyed.body, what=keyed.what)
            return answer.replay(conn)

        # Bounded: a session that holds the run's row (left idle in a transaction, say) makes
        # the answer fail with who holds it, rather than hang the person's request.
        with self.db.begin_bounded(what) as conn:
            replayed = first_answer(conn)
            if replayed is None:
                runs = lock_all(conn, answer.run_ids(conn))
                locked = answer.lock(conn)
                # An answer under the same key may have committed while this one waited.
                replayed = first_answer(conn)
                if replayed is None:
                    turn = Turn(conn, now, runs, policy)
                    result = answer.give(turn, locked)
                    if keyed is not None:
                        record_use(
                            conn, keyed.scope, keyed.key, keyed.body, summary=keyed.summary, at=now
                        )
                    return result, turn.resumes
            # A resume the first answer did not live to fork is still in the outbox: fork it.
            return replayed.result, self.resumer.pending(conn, replayed.resumed)

    def _one(self, table: sa.Table, row_id: str) -> sa.Row[Any] | None:
        if "\x00" in row_id:
            return None  # no id holds a NUL character (and Postgres could not look one up)
        with self.db.engine.connect() as conn:
            return conn.execute(sa.select(table).where(table.c.id == row_id)).one_or_none()

    def _newest(
        self,
        query: sa.Select[Any],
        table: sa.Table,
        *,
        status: str | None,
        run_id: str | None,
        limit: int,
        oldest_first: bool = False,
        only: sa.ColumnElement[bool] | None = None,
    ) -> builtins.list[sa.Row[Any]]:
        """The rows of `query` over `table`, newest first (or oldest first), of one status and
        run if given, and meeting `only` (what a principal may read, `remit.reads`)."""
        at = table.c.created_at.asc() if oldest_first else table.c.created_at.desc()
        query = query.order_by(at, table.c.id).limit(limit)
        if only is not None:
            query = query.where(only)
        if status is not None:
            query = query.where(table.c.status == status)
        if run_id is not None:
            query = query.where(table.c.run_id == run_id)
        with self.db.engine.connect() as conn:
            return builtins.list(conn.execute(query))


def as_json(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A row's fields as JSON: times in ISO 8601."""
    return {
        name: value.isoformat() if isinstance(value, datetime) else value
        for name, value in fields.items()
    }
