"""Approval gates: a run waits for a person's decision without holding anything, and resumes
from the gate on its next attempt without running a finished step again.

The gate (`ctx.approval`) is a DBOS step that creates or reads the approval row and records its
own step number. While the row is pending the attempt writes `waiting` and ends. `decide()` is
the one way a gate is decided; in one transaction it locks the runs, then the approvals (both in
id order: the gate's step takes the run before the approval too), refuses the whole batch with
every reason or writes each decision with its audit row, and moves each waiting run to its next
attempt, forked from the gate's step (`resumes.py`: DBOS copies the steps before it, and an
outbox row covers a decider that dies before the fork).
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import sqlalchemy as sa
from dbos import DBOSClient
from pydantic import BaseModel, ValidationError
from sqlalchemy.dialects import postgresql, sqlite

from remit.core.audit import audit_of
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import (
    AppError,
    ApprovalNotFound,
    DecisionRefused,
    InputInvalid,
    RemitError,
    RunNotFound,
    Suspended,
)
from remit.core.keys import key_problem
from remit.core.outbox import Resume, Resumer
from remit.core.runs import ACTIVE, FINISHED, Run, RunInfo, RunStore, hold_attempt, lock_run
from remit.core.schema import approvals, audit, decisions, notifications, runs
from remit.declare.workflows import check_name
from remit.policy.refusals import DecideCall, check_call, record_denials, refusals

if TYPE_CHECKING:
    from remit.policy.guard import Guard

log = logging.getLogger("remit.approvals")

D = TypeVar("D", bound=BaseModel)

ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "cancelled"]
EXPIRY_ACTOR = "remit:expiry"


@dataclass(frozen=True)
class ApprovalType:
    """A kind of approval the app asks for, with the model its draft must parse against."""

    name: str
    draft: type[BaseModel]
    description: str = ""

    def __post_init__(self) -> None:
        check_name("approval type", self.name)
        if not (isinstance(self.draft, type) and issubclass(self.draft, BaseModel)):
            raise AppError(
                f"approval type `{self.name}`: draft must be a pydantic model class, "
                f"not {self.draft!r}"
            )


@dataclass(frozen=True)
class Approval:
    """One gate as its row holds it."""

    id: str
    run_id: str
    key: str
    type: str
    title: str
    draft: dict[str, Any]
    edited_draft: dict[str, Any] | None
    status: str
    assignee: str | None
    created_at: datetime
    expires_at: datetime | None
    workflow_id: str
    step_id: int
    decided_by: str | None
    decided_via: str | None
    decided_at: datetime | None
    decision_key: str | None
    batch_id: str | None
    reason: str | None
    resumed_workflow_id: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in self.__dict__.items()
        }


@dataclass(frozen=True)
class Decision(Generic[D]):
    """What `ctx.approval` returns once its gate is decided."""

    approval_id: str
    key: str
    status: str
    draft: D
    edited: bool
    decided_by: str | None
    decided_via: str | None
    decided_at: datetime | None
    reason: str | None

    @property
    def approved(self) -> bool:
        return self.status == "approved"


@dataclass(frozen=True)
class Decided:
    """One approval a `decide()` call decided (or, replayed, decided the first time)."""

    approval_id: str
    run_id: str
    key: str
    status: str
    resumed_workflow_id: str | None


@dataclass(frozen=True)
class DecideResult:
    replayed: bool
    batch_id: str | None
    decided: list[Decided]


def new_approval_id() -> str:
    return f"apr_{uuid.uuid4().hex[:16]}"


class Gates:
    """The gate side: what a run's attempt does at `ctx.approval`."""

    def __init__(
        self,
        db: Database,
        types: Mapping[str, ApprovalType],
        *,
        channels: Iterable[str] = (),
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.types = dict(types)
        self.channels = tuple(channels)
        self.clock = clock or SystemClock()

    def prepare(
        self,
        key: str,
        type: str,
        draft: BaseModel | Mapping[str, Any],
        expires_in: timedelta | float | None,
    ) -> tuple[ApprovalType, dict[str, Any], float | None]:
        """Check a gate's arguments before its step runs. Raises with what to change."""
        problem = key_problem(key, what="approval key", longest=100, example="write-off")
        if problem is not None:
            raise InputInvalid(problem, target="ctx.approval", errors=[])
        declared = self.types.get(type)
        if declared is None:
            known = ", ".join(sorted(self.types)) or "none"
            raise AppError(
                f"approval type `{type}` is not declared (declared: {known}): add "
                f"ApprovalType({type!r}, draft=YourModel) to App(approvals=[...])"
            )
        try:
            if isinstance(draft, BaseModel):
                draft = draft.model_dump(mode="json")
            parsed = declared.draft.model_validate(draft)
        except ValidationError as error:
            raise InputInvalid(
                f"the draft of approval `{key}` does not parse as {declared.draft.__name__}: "
                f"{error}",
                target=key,
                errors=[dict(e) for e in error.errors(include_url=False)],
            ) from None
        seconds = expires_in.total_seconds() if isinstance(expires_in, timedelta) else expires_in
        if seconds is not None and seconds <= 0:
            raise InputInvalid(
                f"approval `{key}`: expires_in must be positive, got {expires_in!r}",
                target=key,
                errors=[],
            )
        return declared, parsed.model_dump(mode="json"), seconds

    def open(
        self,
        run: RunInfo,
        step_id: int,
        *,
        key: str,
        type: str,
        title: str,
        draft: dict[str, Any],
        assignee: str | None,
        expires_in: float | None,
    ) -> dict[str, Any]:
        """Create the gate's row, or read it back: the body of the gate's step.

        Idempotent, so DBOS may run it again. Locks the run before the approval, the order
        `decide()` takes them in. A pending gate is moved to the current attempt, which is the
        one a decision must resume. Raises `RunMovedOn` if the run has left this attempt or
        finished (it was cancelled), and `AppError` if an earlier gate of the run took the key.
        """
        now = self.clock.now()

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                hold_attempt(conn, run.run_id, run.workflow_id)
                row = _by_key(conn, run.run_id, key)
                if row is None:
                    row = self._create(
                        conn, run, step_id, key, type, title, draft, assignee, expires_in, now
                    )
                elif row.step_id != step_id:
                    # A step keeps its number across attempts (forks copy them), so another
                    # number is another gate: reusing its key would reuse its decision.
                    raise AppError(
                        f"approval key `{key}` is taken by an earlier gate of run {run.run_id} "
                        f"(step {row.step_id}): give each gate its own key, e.g. "
                        f"f'{key}-{{n}}' in a loop"
                    )
                elif row.status == "pending" and row.workflow_id != run.workflow_id:
                    conn.execute(
                        approvals.update()
                        .where(approvals.c.id == row.id)
                        .values(workflow_id=run.workflow_id, step_id=step_id)
                    )
                    row = _by_key(conn, run.run_id, key)
                    assert row is not None
                return row.as_json()

        return self.db.retrying(f"run {run.run_id}: approval {key}", write)

    def _create(
        self,
        conn: sa.Connection,
        run: RunInfo,
        step_id: int,
        key: str,
        type: str,
        title: str,
        draft: dict[str, Any],
        assignee: str | None,
        expires_in: float | None,
        now: datetime,
    ) -> Approval:
        approval_id = new_approval_id()
        # Another execution of this same step may have inserted the row meanwhile: keep theirs.
        inserted = conn.execute(
            self._insert_new().values(
                id=approval_id,
                run_id=run.run_id,
                key=key,
                type=type,
                title=title,
                draft=draft,
                status="pending",
                assignee=assignee,
                created_at=now,
                expires_at=None if expires_in is None else now + timedelta(seconds=expires_in),
                workflow_id=run.workflow_id,
                step_id=step_id,
            )
        ).rowcount
        if inserted and self.channels:
            conn.execute(
                notifications.insert(),
                [
                    {"approval_id": approval_id, "channel": channel, "attempts": 0, "next_at": now}
                    for channel in self.channels
                ],
            )
        row = _by_key(conn, run.run_id, key)
        assert row is not None
        return row

    def _insert_new(self) -> Any:
        insert = sqlite.insert if self.db.is_sqlite else postgresql.insert
        return insert(approvals).on_conflict_do_nothing(index_elements=["run_id", "key"])

    def outcome(self, row: Mapping[str, Any], declared: ApprovalType) -> Decision[Any]:
        """The decision the gate's step read, or `Suspended` while it is pending."""
        if row["status"] == "pending":
            raise Suspended("waiting", f"approval {row['id']} is pending", approval_id=row["id"])
        edited = row["edited_draft"] is not None
        decided_at = row["decided_at"]
        return Decision(
            approval_id=row["id"],
            key=row["key"],
            status=row["status"],
            draft=declared.draft.model_validate(row["edited_draft"] if edited else row["draft"]),
            edited=edited,
            decided_by=row["decided_by"],
            decided_via=row["decided_via"],
            decided_at=None if decided_at is None else datetime.fromisoformat(decided_at),
            reason=row["reason"],
        )


class Approvals:
    """The deciding side: list, show and decide approvals, and complete the outbox.

    Usable from any process: `decide()` needs no worker here, only the database.
    """

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        types: Mapping[str, ApprovalType],
        *,
        admins: Iterable[str] = (),
        clock: Clock | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.db = db
        self.client = client
        self.types = dict(types)
        self.admins = frozenset(admins)
        # The app's policies: who may decide which type (None: not checked).
        self.guard = guard
        self.clock = clock or SystemClock()
        self.resumer = Resumer(db, client, clock=self.clock)

    def complete_outbox(self, *, older_than: float = 0.0, limit: int = 100) -> int:
        """Fork the attempts the outbox still holds; see `Resumer.complete_outbox`."""
        return self.resumer.complete_outbox(older_than=older_than, limit=limit)

    def get(self, approval_id: str) -> Approval:
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(approvals).where(approvals.c.id == approval_id)
            ).one_or_none()
        if row is None:
            raise ApprovalNotFound(
                f"no approval `{approval_id}`: `remit approvals` lists the approvals"
            )
        return _approval(row)

    def list(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> builtins.list[Approval]:
        query = (
            sa.select(approvals)
            .order_by(approvals.c.created_at.desc(), approvals.c.id)
            .limit(limit)
        )
        if status is not None:
            query = query.where(approvals.c.status == status)
        if run_id is not None:
            query = query.where(approvals.c.run_id == run_id)
        with self.db.engine.connect() as conn:
            return [_approval(row) for row in conn.execute(query)]

    def audit(self, approval_id: str) -> builtins.list[dict[str, Any]]:
        """The audit rows of one approval, oldest first."""
        return audit_of(self.db, approval_id)

    def decide(
        self,
        ids: Iterable[str] | str,
        decision: str,
        *,
        by: str,
        via: str,
        decision_key: str,
        edits: Mapping[str, Mapping[str, Any]] | None = None,
        reason: str | None = None,
        admin: bool | None = None,
    ) -> DecideResult:
        """Decide approvals `ids` as `decision`, all or none, and resume their runs.

        `decision_key` makes the call idempotent: a call repeated with the same key returns the
        first call's result and decides and resumes nothing again. `edits` maps an approval id
        to fields to change in its draft; the edited draft is stored only if it parses against
        the type's model. `admin` (default: `by` is in REMIT_ADMINS) may decide a gate assigned
        to someone else. Raises `DecisionRefused` listing every reason, having written nothing.
        """
        wanted = sorted({ids} if isinstance(ids, str) else set(ids))
        check_call(wanted, decision, by=by, via=via, decision_key=decision_key, edits=edits)
        is_admin = by in self.admins if admin is None else admin
        call = DecideCall(
            wanted, decision, by, via, decision_key, dict(edits or {}), reason, is_admin
        )
        for tries_left in (2, 1, 0):
            try:
                result, to_fork = self.db.retrying(
                    f"decide {decision_key}", lambda: self._decide_once(call)
                )
                break
            except DecisionRefused:
                record_denials(call, self.guard)
                raise
            except sa.exc.IntegrityError:
                # Another call with this decision key committed first: read its result.
                if tries_left == 0:
                    raise
        self.resumer.fork_all(to_fork)
        return result

    def _decide_once(self, call: DecideCall) -> tuple[DecideResult, builtins.list[Resume]]:
        now = self.clock.now()
        with self.db.begin() as conn:
            replay = self._replay(conn, call)
            if replay is not None:
                return replay
            run_ids = sorted(
                set(
                    conn.execute(
                        sa.select(approvals.c.run_id).where(approvals.c.id.in_(call.ids))
                    ).scalars()
                )
            )
            locked_runs = {
                row.run_id: row
                for row in conn.execute(
                    sa.select(
                        runs.c.run_id,
                        runs.c.status,
                        runs.c.workflow_id,
                        runs.c.queue,
                        runs.c.workflow,
                        runs.c.input,
                    )
                    .where(runs.c.run_id.in_(run_ids))
                    .order_by(runs.c.run_id)
                    .with_for_update()
                )
            }
            locked = [
                _approval(row)
                for row in conn.execute(
                    sa.select(approvals)
                    .where(approvals.c.id.in_(call.ids))
                    .order_by(approvals.c.id)
                    .with_for_update()
                )
            ]
            # A call with the same key may have committed while this one waited for the locks.
            replay = self._replay(conn, call)
            if replay is not None:
                return replay
            edited = refusals(call, locked, locked_runs, self.types, self.guard)
            batch_id = uuid.uuid4().hex if len(call.ids) > 1 else None
            conn.execute(
                decisions.insert().values(
                    decision_key=call.decision_key,
                    approval_ids=call.ids,
                    decision=call.decision,
                    decided_by=call.by,
                    via=call.via,
                    batch_id=batch_id,
                    decided_at=now,
                )
            )
            to_fork: list[Resume] = []
            resumed: dict[str, str] = {}
            for run_id in sorted(locked_runs):
                current = locked_runs[run_id].workflow_id
                if not any(row.run_id == run_id and row.workflow_id == current for row in locked):
                    # The run's current attempt has not reached the gate yet: it reads the
                    # decision when it does, so there is nothing to resume.
                    continue
                # Fork from the run's first gate still pending on this attempt (an async run
                # may wait at several at once): the fork re-runs every gate from there on, so
                # one left pending moves to the new attempt instead of being copied.
                gate = min(_pending_on(conn, run_id, current), key=lambda row: row.step_id)
                resume = self.resumer.next_attempt(
                    conn, gate.run_id, gate.workflow_id, gate.step_id, locked_runs[run_id].queue
                )
                to_fork.append(resume)
                resumed[run_id] = resume.workflow_id
            decided = [
                write_decision(
                    conn,
                    row,
                    call.decision,
                    by=call.by,
                    via=call.via,
                    decision_key=call.decision_key,
                    batch_id=batch_id,
                    reason=call.reason,
                    edited_draft=edited.get(row.id),
                    resumed_workflow_id=resumed.get(row.run_id),
                    now=now,
                )
                for row in locked
            ]
            return DecideResult(replayed=False, batch_id=batch_id, decided=decided), to_fork

    def _replay(
        self, conn: sa.Connection, call: DecideCall
    ) -> tuple[DecideResult, builtins.list[Resume]] | None:
        first = conn.execute(
            sa.select(decisions).where(decisions.c.decision_key == call.decision_key)
        ).one_or_none()
        if first is None:
            return None
        if sorted(first.approval_ids) != call.ids:
            raise DecisionRefused(
                [
                    (
                        ", ".join(call.ids),
                        f"decision key {call.decision_key!r} was already used to decide "
                        f"{', '.join(first.approval_ids)}: use a new key for another decision",
                    )
                ]
            )
        rows = [
            _approval(row)
            for row in conn.execute(
                sa.select(approvals).where(approvals.c.id.in_(call.ids)).order_by(approvals.c.id)
            )
        ]
        decided = [
            Decided(row.id, row.run_id, row.key, row.status, row.resumed_workflow_id)
            for row in rows
        ]
        # A resume the first call did not live to fork is still in the outbox: finish it.
        pending = self.resumer.pending(
            conn, [d.resumed_workflow_id for d in decided if d.resumed_workflow_id]
        )
        return DecideResult(replayed=True, batch_id=first.batch_id, decided=decided), pending

    def expire_due(self, *, limit: int = 100) -> builtins.list[Decided]:
        """Decide every pending approval past its expiry as `expired`, through `decide()`.

        The decision key is the approval's own (`expire:<id>`), so two workers sweeping at
        once decide it once. A gate decided meanwhile by a person is left as it is.
        """
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            due = list(
                conn.execute(
                    sa.select(approvals.c.id)
                    .join(runs, runs.c.run_id == approvals.c.run_id)
                    .where(
                        approvals.c.status == "pending",
                        approvals.c.expires_at <= now,
                        # decide() refuses a finished run's gate: do not let those crowd out
                        # the rest of the batch.
                        runs.c.status.not_in(tuple(FINISHED)),
                    )
                    .order_by(approvals.c.expires_at)
                    .limit(limit)
                ).scalars()
            )
        expired: list[Decided] = []
        for approval_id in due:
            try:
                result = self.decide(
                    [approval_id],
                    "expired",
                    by=EXPIRY_ACTOR,
                    via="expiry",
                    decision_key=f"expire:{approval_id}",
                    reason="no decision before it expired",
                )
            except DecisionRefused as refused:
                log.info("expiry: %s", refused)
                continue
            except Exception:
                log.exception("expiry: approval %s could not be expired; next sweep", approval_id)
                continue
            if not result.replayed:
                log.info("expiry: approval %s expired", approval_id)
                expired.extend(result.decided)
        return expired


def write_decision(
    conn: sa.Connection,
    row: Approval,
    status: str,
    *,
    by: str,
    via: str,
    decision_key: str | None,
    batch_id: str | None,
    reason: str | None,
    edited_draft: dict[str, Any] | None,
    resumed_workflow_id: str | None,
    now: datetime,
) -> Decided:
    """Write one decision and its audit row inside the caller's transaction.

    The caller holds the approval's row lock; the write is still conditional on `pending`, and
    anything else is a bug that must roll the whole transaction back.
    """
    written = conn.execute(
        approvals.update()
        .where(approvals.c.id == row.id, approvals.c.status == "pending")
        .values(
            status=status,
            decided_by=by,
            decided_via=via,
            decided_at=now,
            decision_key=decision_key,
            batch_id=batch_id,
            reason=reason,
            edited_draft=edited_draft,
            resumed_workflow_id=resumed_workflow_id,
        )
    ).rowcount
    if written != 1:
        raise RemitError(f"approval {row.id}: its locked pending row matched {written} rows")
    # No one need be told any more that it waits.
    conn.execute(
        notifications.delete().where(
            notifications.c.approval_id == row.id, notifications.c.sent_at.is_(None)
        )
    )
    conn.execute(
        audit.insert().values(
            at=now,
            actor=by,
            action=f"approval.{status}",
            target=row.id,
            meta={
                "run_id": row.run_id,
                "key": row.key,
                "via": via,
                "decision_key": decision_key,
                "batch_id": batch_id,
                "reason": reason,
                "edited": edited_draft is not None,
                "resumed_workflow_id": resumed_workflow_id,
            },
        )
    )
    return Decided(row.id, row.run_id, row.key, status, resumed_workflow_id)


def cancel_run(runs_store: RunStore, client: DBOSClient, run_id: str, *, by: str) -> Run:
    """Cancel a run that has not finished, and its current attempt in DBOS.

    A finished run is left as it is. An attempt in flight stops at its next step; its later
    status writes are refused because the run is no longer running. The run's pending gates are
    cancelled in the same transaction, each with its audit row.
    """
    now = runs_store.clock.now()
    with runs_store.db.begin() as conn:
        row = lock_run(conn, run_id)
        if row is None:
            raise RunNotFound(f"no run `{run_id}`: `remit runs` lists the runs")
        if row.status in FINISHED:
            return runs_store.get(run_id)
        conn.execute(
            runs.update()
            .where(runs.c.run_id == run_id, runs.c.status.in_(ACTIVE))
            .values(status="cancelled", finished_at=now, updated_at=now)
        )
        cancel_gates(conn, run_id, by=by, now=now)
    client.cancel_workflow(row.workflow_id)
    return runs_store.get(run_id)


def cancel_gates(conn: sa.Connection, run_id: str, *, by: str, now: datetime) -> int:
    """Cancel the pending gates of a run being cancelled, in the caller's transaction."""
    pending = [
        _approval(row)
        for row in conn.execute(
            sa.select(approvals)
            .where(approvals.c.run_id == run_id, approvals.c.status == "pending")
            .order_by(approvals.c.id)
            .with_for_update()
        )
    ]
    for row in pending:
        write_decision(
            conn,
            row,
            "cancelled",
            by=by,
            via="cancel",
            decision_key=None,
            batch_id=None,
            reason=f"run {run_id} was cancelled",
            edited_draft=None,
            resumed_workflow_id=None,
            now=now,
        )
    return len(pending)


def _pending_on(conn: sa.Connection, run_id: str, workflow_id: str) -> list[Approval]:
    """The run's gates still pending on its attempt `workflow_id` (the run is locked)."""
    rows = conn.execute(
        sa.select(approvals).where(
            approvals.c.run_id == run_id,
            approvals.c.workflow_id == workflow_id,
            approvals.c.status == "pending",
        )
    )
    return [_approval(row) for row in rows]


def _by_key(conn: sa.Connection, run_id: str, key: str) -> Approval | None:
    row = conn.execute(
        sa.select(approvals).where(approvals.c.run_id == run_id, approvals.c.key == key)
    ).one_or_none()
    return None if row is None else _approval(row)


def _approval(row: sa.Row[Any]) -> Approval:
    return Approval(**{name: row._mapping[name] for name in Approval.__dataclass_fields__})
