"""Approval gates: a run waits for a person's decision without holding anything, and resumes
from the gate on its next attempt without running a finished step again.

The gate (`ctx.approval`, `gates.py`) is a DBOS step that creates or reads the approval row
and records its own step number. While the row is pending the attempt writes `waiting` and
ends. This module declares approvals and decides them; ending a run from outside, which cancels
its gates, is `ending.py`. `decide()` is
the one way a gate is decided, an answer given as `answers.py` gives every answer: in one
transaction it locks the runs, then the approvals (both in id order: the gate's step takes the
run before the approval too), refuses the whole batch with every reason or writes each decision
with its audit row, and moves each waiting run to its next attempt, forked from the gate's step
(`outbox.py`: DBOS copies the steps before it, and an outbox row covers a decider that dies
before the fork).

`withdraw()` is how whoever asked for a gate takes it back while it is pending: it goes the
same way as a decision (the same transaction, locks, audit row and resume), writing
`withdrawn`. Only whoever started the run or an admin may, and with policies only as they let
the one withdrawing too (`withdraw` on the approval's type, told who started the run). The run
reads `withdrawn` as its gate's outcome (`Decision.withdrawn`), and no one may decide the gate
afterwards.

A gate may be assigned to one principal (`assignee="user:carol"`) or to a group of
`policies/principals.toml` (`assignee="group:controllers"`), any member of which may decide it.

An `Approval` read back carries its draft parsed as its type's model (`draft`), and the JSON
stored (`draft_json`), which is what the command line, the HTTP API and notifiers show.

A gate may concern one of the business's records (`ctx.approval(..., record=("invoice", id))`,
else its run's): its opening and its decision are written to that record's activity in the
transactions that make them (`core/activity.py`). `Approvals.archive` cancels every pending
gate about a record, as one decision.
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, ValidationError
from typing_extensions import TypeVar

from remit.core.activity import (
    APPROVAL_OPENED,
    RECORD_ARCHIVED,
    Record,
    RecordRef,
    activity_row,
    check_record,
    record_of,
)
from remit.core.audit import audit_row
from remit.core.clock import Clock
from remit.core.database import Database
from remit.core.errors import (
    AppError,
    ApprovalNotFound,
    DecisionRefused,
    RemitError,
)
from remit.core.fence import FINISHED
from remit.core.limits import check_json, check_text
from remit.core.principals import SYSTEM_PREFIX
from remit.core.schema import activity, approvals, decisions, notifications, runs
from remit.core.waiting import first_waiting
from remit.declare.workflows import check_name
from remit.people.answers import Answer, Answers, KeyedRequest, Replayed, Turn, as_json
from remit.policy.refusals import (
    WITHDRAWN,
    DecideCall,
    check_call,
    refusals,
    withdraw_refusals,
)

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.policy.guard import Guard

log = logging.getLogger("remit.approvals")

# A draft's model. Unnamed (a bare `Approval`), it is Any: an approval read back by id or in a
# list may be of any type.
D = TypeVar("D", bound=BaseModel, default=Any)

ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "cancelled", "withdrawn"]
EXPIRY_ACTOR = "remit:expiry"


@dataclass(frozen=True)
class ApprovalType:
    """A kind of approval the app asks for, with the model its draft must parse against.

    `editable` names the draft's fields a decider may change (default: every field). Every
    other field stays as the run proposed it: an edit changing one is refused, on every surface
    (`decide()` checks it), and the console shows it read-only.
    """

    name: str
    draft: type[BaseModel]
    description: str = ""
    editable: Sequence[str] | None = None
    # remit's own types may add a rule: `refuse(by, decision, draft)` gives why `by` may not
    # decide so (None: the policies decide), and `approves` names an op approving one lets
    # the run call, which the decider must be let call too (`Action::"call"` on it).
    refuse: Callable[[str, str, Mapping[str, Any]], str | None] | None = None
    approves: str | None = None

    def __post_init__(self) -> None:
        check_name("approval type", self.name)
        if not (isinstance(self.draft, type) and issubclass(self.draft, BaseModel)):
            raise AppError(
                f"approval type `{self.name}`: draft must be a pydantic model class, "
                f"not {self.draft!r}"
            )
        if self.editable is not None:
            object.__setattr__(self, "editable", _editable(self.name, self.draft, self.editable))

    @property
    def editable_fields(self) -> tuple[str, ...]:
        """The draft's fields a decider may change, in the model's order."""
        fields = tuple(self.draft.model_fields)
        return fields if self.editable is None else tuple(f for f in fields if f in self.editable)

    @property
    def read_only(self) -> tuple[str, ...]:
        """The draft's fields a decider may not change, in the model's order."""
        return tuple(f for f in self.draft.model_fields if f not in self.editable_fields)


def _editable(name: str, draft: type[BaseModel], editable: object) -> tuple[str, ...]:
    """`editable` as the tuple of field names it lists, refused unless each is a field of
    `draft`."""
    fields = ", ".join(draft.model_fields) or "none"
    if isinstance(editable, str) or not isinstance(editable, Iterable):
        raise AppError(
            f"approval type `{name}`: editable must list field names of {draft.__name__}, "
            f"e.g. editable=[{next(iter(draft.model_fields), 'amount')!r}], not {editable!r}"
        )
    named = tuple(editable)
    unknown = [each for each in named if each not in draft.model_fields]
    if unknown:
        listed = ", ".join(f"`{each}`" for each in unknown)
        raise AppError(
            f"approval type `{name}`: editable names {listed}, which {draft.__name__} does not "
            f"have (its fields: {fields})"
        )
    return named


class UndeclaredDraft(BaseModel):
    """The draft of an approval whose type this process does not declare, or whose type's model
    no longer parses it (the app changed since the gate opened): its fields as stored."""

    model_config = ConfigDict(extra="allow", frozen=True)


@dataclass(frozen=True)
class Approval(Generic[D]):
    """One gate as its row holds it.

    `draft` is the draft the run proposed, parsed as the approval type's model (an
    `UndeclaredDraft` where the type is not known here); `edited_draft` is the draft as
    approved, when the decider edited it. `draft_json` and `edited_draft_json` are the same as
    stored, as JSON. `editable` names the draft's fields a decider may change (None where the
    type is not known here).
    """

    id: str
    run_id: str
    key: str
    type: str
    title: str
    draft: D
    edited_draft: D | None
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
    draft_json: dict[str, Any]
    edited_draft_json: dict[str, Any] | None
    editable: tuple[str, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        """The row as JSON, its drafts as stored: what the gate's step returns."""
        row = {name: getattr(self, name) for name in _COLUMNS}
        return as_json({**row, "draft": self.draft_json, "edited_draft": self.edited_draft_json})


# An approval's fields that are its row's columns as they are.
_COLUMNS = tuple(
    f.name
    for f in fields(Approval)
    if f.name not in ("draft", "edited_draft", "draft_json", "edited_draft_json", "editable")
)


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

    @property
    def withdrawn(self) -> bool:
        """Whoever asked for the gate took it back before anyone decided it."""
        return self.status == WITHDRAWN


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


@dataclass(frozen=True)
class Archived:
    """What archiving a record did: the gates about it that were pending, now cancelled (none
    when none was pending, and nothing was written). `replayed` when an archive of the same
    gates by the same person committed first, and this one returns what that one did."""

    record_type: str
    record_id: str
    cancelled: tuple[Decided, ...]
    replayed: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "record_type": self.record_type,
            "record_id": self.record_id,
            "cancelled": [as_json(d.__dict__) for d in self.cancelled],
            "replayed": self.replayed,
        }


class Approvals(Answers):
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
        super().__init__(db, client, guard=guard, clock=clock)
        self.types = dict(types)
        self.admins = frozenset(admins)

    def complete_outbox(self, *, older_than: float = 0.0, limit: int = 100) -> int:
        """Fork the attempts the outbox still holds; see `Resumer.complete_outbox`."""
        return self.resumer.complete_outbox(older_than=older_than, limit=limit)

    def get(self, approval_id: str) -> Approval[Any]:
        row = self._one(approvals, approval_id)
        if row is None:
            raise ApprovalNotFound(
                f"no approval `{approval_id}`: `remit approvals` lists the approvals"
            )
        return approval_of(row, self.types)

    def list(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        oldest_first: bool = False,
        only: sa.ColumnElement[bool] | None = None,
    ) -> builtins.list[Approval[Any]]:
        """The approvals, newest first (or oldest first)."""
        rows = self._newest(
            sa.select(approvals),
            approvals,
            status=status,
            run_id=run_id,
            limit=limit,
            oldest_first=oldest_first,
            only=only,
        )
        return [approval_of(row, self.types) for row in rows]

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
        the type's model and changes no field the type keeps (`ApprovalType(editable=...)`).
        `admin` (default: `by` is in REMIT_ADMINS) may decide a gate assigned
        to someone else. Raises `DecisionRefused` listing every reason, having written nothing.
        """
        wanted = sorted({ids} if isinstance(ids, str) else set(ids))
        check_call(wanted, decision, by=by, via=via, decision_key=decision_key, edits=edits)
        check_decision(wanted, edits, reason)
        is_admin = by in self.admins if admin is None else admin
        call = DecideCall(
            wanted, decision, by, via, decision_key, dict(edits or {}), reason, is_admin
        )
        return self._give(f"decide {decision_key}", _Decision(call, self.types))

    def withdraw(
        self,
        approval_id: str,
        *,
        by: str,
        via: str,
        key: str,
        reason: str | None = None,
        admin: bool | None = None,
    ) -> DecideResult:
        """Withdraw the pending gate `approval_id` as `by`, who asked for it, and resume its
        run, which reads the gate as `withdrawn`.

        It is given as a decision is (the same transaction, audit row, activity row and
        resume). Only whoever started the run or an admin (`admin`, default: `by` is in
        REMIT_ADMINS) may withdraw it, with or without policies; with policies it is also
        checked as `withdraw` on the approval's type, and the policies are told who started
        the run (`requester`) and whether `by` is they (`is_requester`). `key` makes the call
        idempotent as a decision key does. Raises `DecisionRefused` (a withdrawal, nothing
        written) when the gate is no longer pending, its run has finished, `by` may not
        withdraw it, or the policies refuse it.
        """
        if by.startswith(SYSTEM_PREFIX):
            raise RemitError(
                f"withdraw(): {by} is remit's own: a gate is withdrawn by the person or agent "
                "who asked for it (user:<name> or agent:<name>)"
            )
        check_call(
            [approval_id],
            WITHDRAWN,
            by=by,
            via=via,
            decision_key=key,
            edits=None,
            allowed=(WITHDRAWN,),
        )
        check_decision([approval_id], None, reason)
        is_admin = by in self.admins if admin is None else admin
        call = DecideCall([approval_id], WITHDRAWN, by, via, key, {}, reason, is_admin)
        return self._give(f"withdraw {key}", _Withdrawal(call, self.types))

    def archive(
        self,
        app: str,
        record: Record,
        *,
        by: str,
        reason: str | None = None,
        admin: bool | None = None,
    ) -> Archived:
        """Archive the record `record` (`(type, id)`) of the app `app`: cancel every pending gate
        that concerns it, all or none, through `decide()` as `cancelled` via `archive`.

        It is a decision like any other: the policies are asked `decide` on each gate's
        approval type with the decision `cancelled` (a principal who may not cancel one of the
        gates is refused, and nothing is written), the assignee rule applies, each gate gets
        its audit row, and each run waiting at one resumes and sees its gate cancelled. One
        `record.archived` row is written to the record's activity in the same transaction.
        A record with no pending gate (archived already, say) is left as it is.
        """
        record_type, record_id = check_record(record, where="archive_record")
        ref = RecordRef(app, record_type, record_id)
        check_text(reason, what="the archive's reason", target=f"{record_type} {record_id}")
        why = reason or f"{record_type} {record_id} was archived"
        is_admin = by in self.admins if admin is None else admin
        for tries_left in (2, 1, 0):
            ids = self._pending_about(ref)
            if not ids:
                return Archived(record_type, record_id, ())
            named = "\n".join([app, record_type, record_id, by, why, *ids])
            key = "archive:" + hashlib.sha256(named.encode()).hexdigest()[:40]
            check_call(ids, "cancelled", by=by, via="archive", decision_key=key, edits=None)
            call = DecideCall(ids, "cancelled", by, "archive", key, {}, why, is_admin)
            try:
                result = self._give(
                    f"archive {record_type} {record_id}", _Archive(call, self.types, ref)
                )
            except DecisionRefused as refused:
                # A gate decided meanwhile by someone else: archive what is still pending.
                if tries_left == 0 or refused.by_policy or self._pending_about(ref) == ids:
                    raise
                continue
            return Archived(record_type, record_id, tuple(result.decided), result.replayed)
        raise AssertionError("unreachable")

    def _pending_about(self, ref: RecordRef) -> builtins.list[str]:
        """The ids of the pending gates that concern `ref`, of runs that have not finished."""
        with self.db.engine.connect() as conn:
            return sorted(
                set(
                    conn.execute(
                        sa.select(approvals.c.id)
                        .join(activity, activity.c.target == approvals.c.id)
                        .join(runs, runs.c.run_id == approvals.c.run_id)
                        .where(
                            activity.c.app == ref.app,
                            activity.c.record_type == ref.record_type,
                            activity.c.record_id == ref.record_id,
                            activity.c.kind == APPROVAL_OPENED,
                            approvals.c.status == "pending",
                            runs.c.status.not_in(tuple(FINISHED)),
                        )
                    ).scalars()
                )
            )

    def expire_due(self, *, limit: int = 100) -> builtins.list[Decided]:
        """Decide every pending approval past its expiry as `expired`, through `decide()`.

        The decision key is the approval's own (`expire:<id>`), so two workers sweeping at
        once decide it once. A gate decided meanwhile by a person is left as it is.
        """
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            due = builtins.list(
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
        expired: builtins.list[Decided] = []
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


@dataclass(frozen=True)
class _Decision(Answer[list[Approval[Any]], DecideResult]):
    """A `decide()` call as an answer: it locks its approvals, and resumes each run whose
    current attempt waits at one of them."""

    call: DecideCall
    types: Mapping[str, ApprovalType]

    def run_ids(self, conn: sa.Connection) -> Iterable[str]:
        return conn.execute(
            sa.select(approvals.c.run_id).where(approvals.c.id.in_(self.call.ids))
        ).scalars()

    def lock(self, conn: sa.Connection) -> list[Approval[Any]]:
        rows = conn.execute(
            sa.select(approvals)
            .where(approvals.c.id.in_(self.call.ids))
            .order_by(approvals.c.id)
            .with_for_update()
        )
        return [approval_of(row, self.types) for row in rows]

    def keyed(self) -> KeyedRequest:
        call = self.call
        body = {
            "ids": call.ids,
            "decision": call.decision,
            "by": call.by,
            "edits": call.edits,
            "reason": call.reason,
        }
        edited = " with edits" if call.edits else ""
        verbs = {"approved": "approve", "rejected": "reject", WITHDRAWN: "withdraw"}
        verb = verbs.get(call.decision, call.decision)
        summary = f"{verb} {', '.join(call.ids)}{edited} as {call.by}"
        return KeyedRequest("decision", call.decision_key, "decision key", body, summary)

    def replay(self, conn: sa.Connection) -> Replayed[DecideResult] | None:
        call = self.call
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
        rows = conn.execute(
            sa.select(approvals).where(approvals.c.id.in_(call.ids)).order_by(approvals.c.id)
        )
        decided = [
            Decided(row.id, row.run_id, row.key, row.status, row.resumed_workflow_id)
            for row in rows
        ]
        result = DecideResult(replayed=True, batch_id=first.batch_id, decided=decided)
        return Replayed(result, [d.resumed_workflow_id for d in decided if d.resumed_workflow_id])

    def refused(self, turn: Turn, locked: list[Approval[Any]]) -> dict[str, dict[str, Any]]:
        """Raise `DecisionRefused` with every reason the call is refused for; else the edited
        drafts, by approval id."""
        return refusals(self.call, locked, turn.runs, self.types, turn.policy)

    def give(self, turn: Turn, locked: list[Approval[Any]]) -> DecideResult:
        call, conn = self.call, turn.conn
        edited = self.refused(turn, locked)
        batch_id = uuid.uuid4().hex if len(call.ids) > 1 else None
        conn.execute(
            decisions.insert().values(
                decision_key=call.decision_key,
                approval_ids=call.ids,
                decision=call.decision,
                decided_by=call.by,
                via=call.via,
                batch_id=batch_id,
                decided_at=turn.now,
            )
        )
        resumed: dict[str, str] = {}
        for run_id, run in sorted(turn.runs.items()):
            if not any(
                row.run_id == run_id and row.workflow_id == run.workflow_id for row in locked
            ):
                # The run's current attempt has not reached the gate yet: it reads the
                # decision when it does, so there is nothing to resume.
                continue
            # Fork from the run's first wait on this attempt (an async run may wait at several
            # gates, or a gate and a message, at once): the fork re-runs every wait from there
            # on, so one left pending moves to the new attempt instead of being copied.
            gate = min(_pending_on(conn, run_id, run.workflow_id), key=lambda row: row.step_id)
            waiting = first_waiting(conn, run_id, run.workflow_id)
            from_step = gate.step_id if waiting is None else min(waiting, gate.step_id)
            resumed[run_id] = turn.resume(run, from_step).workflow_id
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
                now=turn.now,
            )
            for row in locked
        ]
        return DecideResult(replayed=False, batch_id=batch_id, decided=decided)


@dataclass(frozen=True)
class _Withdrawal(_Decision):
    """A withdrawal as an answer: a decision of `withdrawn`, refused for what refuses a
    withdrawal (`withdraw_refusals`) rather than a decision."""

    def refused(self, turn: Turn, locked: list[Approval[Any]]) -> dict[str, dict[str, Any]]:
        # Who started each run: it never changes, and the runs are locked already.
        rows = turn.conn.execute(
            sa.select(runs.c.run_id, runs.c.started_by).where(runs.c.run_id.in_(sorted(turn.runs)))
        )
        requesters = {row.run_id: row.started_by for row in rows}
        withdraw_refusals(self.call, locked, turn.runs, requesters, turn.policy)
        return {}


@dataclass(frozen=True)
class _Archive(_Decision):
    """An archive as an answer: the decision cancelling the record's pending gates, and the
    record's `record.archived` activity row with it."""

    ref: RecordRef

    def give(self, turn: Turn, locked: list[Approval[Any]]) -> DecideResult:
        result = super().give(turn, locked)
        count = len(result.decided)
        activity_row(
            turn.conn,
            self.ref,
            at=turn.now,
            kind=RECORD_ARCHIVED,
            actor=self.call.by,
            summary=(
                f"archived: {count} pending gate{'s' if count != 1 else ''} cancelled "
                f"({', '.join(d.approval_id for d in result.decided)}): {self.call.reason}"
            ),
            meta={
                "cancelled": [d.approval_id for d in result.decided],
                "runs": sorted({d.run_id for d in result.decided}),
                "reason": self.call.reason,
                "decision_key": self.call.decision_key,
            },
        )
        return result


def write_decision(
    conn: sa.Connection,
    row: Approval[Any],
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
    """Write one decision and its audit row inside the caller's transaction, and its activity
    row when the gate concerns a record.

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
    audit_row(
        conn,
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
    ref = record_of(conn, row.id, APPROVAL_OPENED)
    if ref is not None:
        edited = " with edits" if edited_draft is not None else ""
        because = f": {reason}" if reason else ""
        activity_row(
            conn,
            ref,
            at=now,
            kind=f"approval.{status}",
            actor=by,
            summary=f"{row.title}: {status}{edited} via {via}{because}",
            run_id=row.run_id,
            target=row.id,
            meta={
                "key": row.key,
                "type": row.type,
                "via": via,
                "reason": reason,
                "decision_key": decision_key,
                "edited_draft": edited_draft,
                "resumed_workflow_id": resumed_workflow_id,
            },
        )
    return Decided(row.id, row.run_id, row.key, status, resumed_workflow_id)


def _pending_on(conn: sa.Connection, run_id: str, workflow_id: str) -> list[Approval[Any]]:
    """The run's gates still pending on its attempt `workflow_id` (the run is locked)."""
    rows = conn.execute(
        sa.select(approvals).where(
            approvals.c.run_id == run_id,
            approvals.c.workflow_id == workflow_id,
            approvals.c.status == "pending",
        )
    )
    return [approval_of(row, {}) for row in rows]


def approval_of(row: sa.Row[Any], types: Mapping[str, ApprovalType]) -> Approval[Any]:
    """The approval `row` holds, its drafts parsed as its type's model where `types` has it."""
    stored = row._mapping
    declared = types.get(stored["type"])
    edited = stored["edited_draft"]
    return Approval(
        **{name: stored[name] for name in _COLUMNS},
        draft=_parsed(declared, stored["draft"]),
        edited_draft=None if edited is None else _parsed(declared, edited),
        draft_json=stored["draft"],
        edited_draft_json=edited,
        editable=None if declared is None else declared.editable_fields,
    )


def check_decision(
    ids: Iterable[str], edits: Mapping[str, Mapping[str, Any]] | None, reason: str | None
) -> None:
    """Refuse, before anything is read or written, what no decision may carry: a NUL character
    in an id, an edit or the reason, edits past `REMIT_MAX_DRAFT_BYTES`, a reason past
    `REMIT_MAX_REASON_CHARS`."""
    for approval_id in ids:
        check_json(approval_id, what="an approval id", cap="draft_bytes", target="decide")
    check_text(reason, what="the decision's reason", target="decide")
    for approval_id, edit in (edits or {}).items():
        check_json(approval_id, what="an approval id in edits", cap="draft_bytes", target="decide")
        check_json(
            edit,
            what=f"the edits to approval {approval_id}",
            cap="draft_bytes",
            target=approval_id,
            after="edit fewer fields, or raise the limit",
        )


def _parsed(declared: ApprovalType | None, draft: dict[str, Any]) -> BaseModel:
    if declared is not None:
        try:
            return declared.draft.model_validate(draft)
        except ValidationError:
            pass  # stored under an earlier model of the type: shown as stored
    return UndeclaredDraft.model_validate(draft)
