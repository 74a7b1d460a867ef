"""A principal's inbox: the pending gates they may decide, oldest first.

A gate is in someone's inbox when its run has not finished, the assignee rule lets them decide
it (it is assigned to no one, to them, to a group they are in, or they are an admin), and the
app's policies let them approve or reject it as its draft stands, asked as `decide()` asks
them. Asking here records no denial: a gate the policies keep from someone is simply not theirs
to see. `decide()` asks again, with any edits, when they decide.

`may_withdraw` says, the same way, whether someone may withdraw a pending gate (they started
its run or are an admin, and the policies, if any, let them): what the web console asks before
it shows them the button.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remit.core.activity import APPROVAL_OPENED, RecordRef, record_of
from remit.core.database import Database
from remit.core.fence import FINISHED
from remit.core.principals import SYSTEM_PREFIX
from remit.core.runs import Run, RunStore
from remit.policy.refusals import (
    decide_context,
    is_assignee,
    requester_or_admin,
    withdraw_context,
)

if TYPE_CHECKING:
    from remit.people.approvals import Approval
    from remit.policy.guard import Guard

# The decisions a person gives from an inbox.
CHOICES = ("approved", "rejected")


@dataclass(frozen=True)
class Decidable:
    """A pending gate in a principal's inbox, with its run, the record it concerns (if any)
    and the decisions they may give (`approved`, `rejected`, or both)."""

    approval: Approval[Any]
    run: Run
    record: RecordRef | None
    decisions: tuple[str, ...]


def decidable(
    db: Database,
    pending: Iterable[Approval[Any]],
    runs: RunStore,
    guard: Guard,
    *,
    by: str,
    admin: bool,
) -> list[Decidable]:
    """The gates of `pending` that `by` may decide, oldest first (see the module's docstring).
    `admin`: `by` may decide a gate assigned to someone else."""
    found: list[Decidable] = []
    for approval in sorted(pending, key=lambda a: (a.created_at, a.id)):
        if approval.status != "pending":
            continue
        if (
            approval.assignee is not None
            and not admin
            and not is_assignee(by, approval.assignee, guard.policy)
        ):
            continue
        run = runs.find(approval.run_id)
        if run is None or run.status in FINISHED:
            continue
        allowed = tuple(
            decision
            for decision in CHOICES
            if _allowed(guard, by, decision, approval, run.workflow, run.input)
        )
        if allowed:
            with db.engine.connect() as conn:
                record = record_of(conn, approval.id, APPROVAL_OPENED)
            found.append(Decidable(approval, run, record, allowed))
    return found


def _allowed(
    guard: Guard, by: str, decision: str, approval: Approval[Any], workflow: str, input: Any
) -> bool:
    if by.startswith(SYSTEM_PREFIX):
        return False  # remit's own principals decide through their own channels
    if not guard.policy.enabled:
        return True
    draft = approval.edited_draft_json or approval.draft_json
    context = decide_context(decision, approval.type, draft, workflow=workflow, input=input)
    return guard.policy.check(by, "decide", approval.type, context).allowed


def may_withdraw(guard: Guard, by: str, approval: Approval[Any], run: Run, *, admin: bool) -> bool:
    """Whether `by` may withdraw the pending gate `approval` of `run` as `withdraw()` would
    let them: they started the run or are an admin (`admin`), and the policies, if the app has
    any, let them; asking records no denial."""
    if approval.status != "pending" or run.status in FINISHED or by.startswith(SYSTEM_PREFIX):
        return False
    if not requester_or_admin(by, run.started_by, admin=admin):
        return False
    if not guard.policy.enabled:
        return True
    draft = approval.edited_draft_json or approval.draft_json
    context = withdraw_context(by, run.started_by, draft, workflow=run.workflow, input=run.input)
    return guard.policy.check(by, "withdraw", approval.type, context).allowed
