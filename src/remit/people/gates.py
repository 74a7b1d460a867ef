"""The gate side of an approval: what a run's attempt does at `ctx.approval`.

The gate is a DBOS step that creates or reads the approval row and records its own step
number. While the row is pending the attempt writes `waiting` and ends (`Suspended`); once it
is decided (`approvals.py`), the run's next attempt, forked from this step, reads the decision.
A gate may concern one of the business's records (`ctx.approval(..., record=("invoice", id))`,
else its run's): its opening is written to that record's activity in the transaction that
makes it.

A gate assigned to a group (`assignee="group:controllers"`) names a group of the app's
`policies/principals.toml`: one it does not list fails the run at the gate, saying so, before
anything is written.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError

from remit.core.activity import APPROVAL_OPENED, Record, RecordRef, activity_row, record_of_run
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import AppError, InputInvalid, RemitError, Suspended
from remit.core.fence import hold
from remit.core.keys import key_problem
from remit.core.limits import check_json
from remit.core.runs import RunInfo
from remit.core.schema import approvals, notifications
from remit.policy.refusals import GROUP_PREFIX

if TYPE_CHECKING:
    from remit.policy.cedar import Policy

from remit.people.approvals import Approval, ApprovalType, Decision, approval_of

log = logging.getLogger("remit.approvals")


def new_approval_id() -> str:
    return f"apr_{uuid.uuid4().hex[:16]}"


class Gates:
    """The gate side: what a run's attempt does at `ctx.approval`.

    `policy` returns the app's policies, whose `principals.toml` lists the groups a gate may be
    assigned to (None: a group assignee is not checked here)."""

    def __init__(
        self,
        db: Database,
        types: Mapping[str, ApprovalType],
        *,
        channels: Iterable[str] = (),
        clock: Clock | None = None,
        policy: Callable[[], Policy] | None = None,
    ) -> None:
        self.db = db
        self.types = dict(types)
        self.channels = tuple(channels)
        self.clock = clock or SystemClock()
        self.policy = policy

    def check_assignee(self, key: str, assignee: str | None) -> None:
        """Refuse an assignee that names a group neither `principals.toml` nor the data files
        (`remit.group`) declare, saying which groups there are."""
        if assignee is None or not assignee.startswith(GROUP_PREFIX) or self.policy is None:
            return
        policy = self.policy()
        group = assignee.removeprefix(GROUP_PREFIX)
        if group in policy.groups:
            return
        listed = ", ".join(f"group:{name}" for name in sorted(policy.groups)) or "none"
        where = (
            "the app has no policies/principals.toml"
            if policy.folder is None
            else f"{policy.folder.name}/principals.toml lists no group `{group}`"
        )
        raise AppError(
            f"approval `{key}` is assigned to {assignee}, but {where}, nor do the data files "
            f"declare it (the groups there are: {listed}): assign it to one of those, or add "
            "the group to principals.toml's [groups] or as a remit.group declaration"
        )

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
            check_json(draft, what=f"the draft of approval `{key}`", cap="draft_bytes", target=key)
            parsed = declared.draft.model_validate(draft)
        except ValidationError as error:
            raise InputInvalid.of(
                error,
                what=f"the draft of approval `{key}` ({declared.draft.__name__})",
                target=key,
                after="Fix the draft the workflow passes to ctx.approval",
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
        record: Record | None = None,
        app: str | None = None,
    ) -> dict[str, Any]:
        """Create the gate's row, or read it back: the body of the gate's step.

        Idempotent, so DBOS may run it again. Locks the run before the approval, the order
        `decide()` takes them in. A pending gate is moved to the current attempt, which is the
        one a decision must resume. Raises `RunMovedOn` if the run has left this attempt or
        finished (it was cancelled), and `AppError` if an earlier gate of the run took the key.

        The gate concerns `record` (of the app `app`), else its run's record, if any: its
        opening is written to that record's activity with the row.
        """
        now = self.clock.now()
        if record is not None and app is None:
            raise RemitError(f"approval {key}: a gate naming a record needs its app's name")
        named = None if record is None or app is None else RecordRef(app, *record)

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                hold(conn, run.run_id, run.workflow_id)
                row = _by_key(conn, run.run_id, key, self.types)
                if row is None:
                    # Checked as the gate opens, not when a later attempt reads it back.
                    self.check_assignee(key, assignee)
                    row = self._create(
                        conn,
                        run,
                        step_id,
                        key,
                        type,
                        title,
                        draft,
                        assignee,
                        expires_in,
                        now,
                        named,
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
                    row = _by_key(conn, run.run_id, key, self.types)
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
        named: RecordRef | None,
    ) -> Approval[Any]:
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
        row = _by_key(conn, run.run_id, key, self.types)
        assert row is not None
        if inserted:
            ref = named or record_of_run(conn, run.run_id)
            if ref is not None:
                activity_row(
                    conn,
                    ref,
                    at=now,
                    kind=APPROVAL_OPENED,
                    actor=run.actor,
                    summary=f"{title}: waits for a decision",
                    run_id=run.run_id,
                    target=row.id,
                    meta={
                        "key": key,
                        "type": type,
                        "assignee": assignee,
                        "expires_at": None
                        if row.expires_at is None
                        else row.expires_at.isoformat(),
                        "draft": draft,
                    },
                )
        return row

    def _insert_new(self) -> Any:
        insert = self.db.insert
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


def _by_key(
    conn: sa.Connection, run_id: str, key: str, types: Mapping[str, ApprovalType]
) -> Approval[Any] | None:
    row = conn.execute(
        sa.select(approvals).where(approvals.c.run_id == run_id, approvals.c.key == key)
    ).one_or_none()
    return None if row is None else approval_of(row, types)
