"""What an answer to a waiting run refuses: the policy checks every answer goes through
(`PolicyChecks`), and for `decide()` the mistakes in the call itself and every reason a batch
cannot be decided (found together, so the caller sees them all at once and nothing is written).

A decision by a person or agent is checked against the app's policies as `decide` on the
approval's type, with the decision, the draft as it would stand after the edits, and the run's
workflow and input as context; a task's answer as `resolve` on the task's op (see `tasks.py`).
A refusal by policy is one more reason, recorded as a denial once the answer is refused.

A gate withdrawn by whoever asked for it (`Approvals.withdraw`) is refused for the same reasons
a decision is about the gate itself (it is no longer pending, its run has finished). Whether or
not the app has policies, only whoever started the run (the requester) or an admin may withdraw
its gates (`requester_or_admin`): the gate is theirs to take back, and without this rule anyone
could end someone else's wait. With policies it is also checked as `withdraw` on the approval's
type, with who started the run as context, and both must let them (`withdraw_refusals`; the
policies are asked only once the rule lets them, so a refusal by it records no denial). The
assignee rule is the deciders', and does not apply to a withdrawal.

A gate assigned to a group (`assignee="group:controllers"`) is decided by any member of the
group `policies/principals.toml` lists (`is_assignee`), or an admin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ValidationError

from remit.core.errors import DecisionRefused, RemitError
from remit.core.fence import FINISHED, LockedRun
from remit.core.keys import key_problem
from remit.core.principals import SYSTEM_PREFIX, check_principal
from remit.core.text import unsafe
from remit.policy.cedar import Action, Policy, denied

if TYPE_CHECKING:
    from remit.policy.guard import Guard


class Approval(Protocol):
    """What a decision's checks read of an approval: `people.approvals.Approval`, which sits
    above the policies."""

    @property
    def id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def assignee(self) -> str | None: ...

    @property
    def decided_by(self) -> str | None: ...

    @property
    def draft_json(self) -> dict[str, Any]: ...

    @property
    def edited_draft_json(self) -> dict[str, Any] | None: ...


class ApprovalType(Protocol):
    """What an edit's check reads of an approval type: `people.approvals.ApprovalType`, whose
    draft model the edited draft must parse against, and which of its fields a decider may
    change."""

    @property
    def name(self) -> str: ...

    @property
    def draft(self) -> type[BaseModel]: ...

    @property
    def editable_fields(self) -> tuple[str, ...]: ...

    @property
    def read_only(self) -> tuple[str, ...]: ...

    @property
    def refuse(self) -> Callable[[str, str, Mapping[str, Any]], str | None] | None: ...

    @property
    def approves(self) -> str | None: ...


# What `decide()` may write.
DECISIONS: tuple[str, ...] = ("approved", "rejected", "expired", "cancelled")
# What a gate withdrawn by whoever asked for it reads as: written by `withdraw()`, never by a
# decision.
WITHDRAWN = "withdrawn"
# How an assignee names a group of `principals.toml` rather than one principal.
GROUP_PREFIX = "group:"
# Channels that decide for no person: neither the assignee rule nor policies apply to them.
SYSTEM_VIA = frozenset({"expiry", "system"})


@dataclass(frozen=True)
class DecideCall:
    """One `decide()` call's arguments, checked."""

    ids: list[str]
    decision: str
    by: str
    via: str
    decision_key: str
    edits: dict[str, Mapping[str, Any]]
    reason: str | None
    admin: bool


class PolicyChecks:
    """The policy checks of one answer (a decision, a task's answer), and their refusals.

    A refusal is a reason to refuse the answer. It is recorded as a denial (`remit denials`)
    by `record`, once the answer's transaction has rolled back: written inside it, it would be
    rolled back with it (and on SQLite wait for the write lock that transaction holds). Each
    try of the transaction checks afresh after `clear`, so a refusal is recorded once.
    """

    def __init__(self, guard: Guard | None) -> None:
        self.guard = guard
        self.found: list[tuple[str, Action, str, dict[str, Any], str]] = []

    def refusal(
        self,
        by: str,
        action: Action,
        resource: str,
        context: Mapping[str, Any],
        *,
        about: tuple[str, str],
    ) -> str | None:
        """Why the policies do not let `by` take `action` on `resource` with `context`; None
        when they do, when the app has none to ask, or for remit's own principals. `about`
        names what is answered, e.g. `("approval", id)`, and is kept in the denial's context."""
        if self.guard is None or by.startswith(SYSTEM_PREFIX):
            return None
        verdict = self.guard.policy.check(by, action, resource, context)
        if verdict.allowed:
            return None
        kind, target = about
        self.found.append((by, action, resource, {**context, kind: target}, verdict.reason))
        return str(denied(by, action, resource, verdict.reason))

    def assigned(self, by: str, assignee: str) -> bool:
        """Whether `by` is the gate's assignee `assignee`, or a member of the group it names."""
        return is_assignee(by, assignee, None if self.guard is None else self.guard.policy)

    def clear(self) -> None:
        self.found.clear()

    def record(self) -> None:
        """Record the refusals found, after the refused answer's transaction rolled back."""
        if self.guard is not None:
            for by, action, resource, context, reason in self.found:
                self.guard.record(by, action, resource, context, reason)
        self.found.clear()


def is_assignee(by: str, assignee: str, policy: Policy | None) -> bool:
    """Whether `by` is `assignee`, or a member of the group `assignee` names (`group:<name>`,
    as `policy`'s `principals.toml` lists it; with no policies, no group has a member)."""
    if assignee.startswith(GROUP_PREFIX):
        return policy is not None and policy.in_group(by, assignee.removeprefix(GROUP_PREFIX))
    return by == assignee


def check_call(
    ids: list[str],
    decision: str,
    *,
    by: str,
    via: str,
    decision_key: str,
    edits: Mapping[str, Any] | None,
    allowed: tuple[str, ...] = DECISIONS,
) -> None:
    """Mistakes in the call itself, before any database work. `allowed`: what the call may
    write (`decide()`'s decisions, or `withdraw()`'s `withdrawn`)."""
    if not ids:
        raise RemitError("decide() needs at least one approval id")
    if decision == WITHDRAWN and decision not in allowed:
        raise RemitError(
            "a gate is withdrawn by whoever asked for it, not decided as withdrawn: use "
            "`remit approvals withdraw ID`, POST /approvals/{id}/withdraw or "
            "client.approvals.withdraw(id)"
        )
    if decision not in allowed:
        raise RemitError(f"decision {decision!r} is not one of {', '.join(allowed)}")
    check_principal(by, where="decide(): by")
    if not isinstance(via, str) or not via.strip() or len(via) > 50 or unsafe(via):
        raise RemitError("decide(): via must be 1 to 50 characters with no control characters")
    problem = key_problem(decision_key, what="decide(): decision_key", longest=200, example="d-1")
    if problem is not None:
        raise RemitError(problem)
    if edits is not None and not isinstance(edits, Mapping):
        raise RemitError("decide(): edits must map an approval id to the fields it changes")


def refusals(
    call: DecideCall,
    locked: Sequence[Approval],
    locked_runs: Mapping[str, LockedRun],
    types: Mapping[str, ApprovalType],
    policy: PolicyChecks,
) -> dict[str, dict[str, Any]]:
    """Every reason to refuse the batch, raised together; else the parsed edits."""
    reasons = _missing(call, locked)
    for approval_id in sorted(set(call.edits) - set(call.ids)):
        reasons.append((approval_id, "has an edit but is not in the batch"))
    parsed: dict[str, dict[str, Any]] = {}
    for row in locked:
        run = locked_runs.get(row.run_id)
        reasons += [(row.id, why) for why in _standing(row, run)]
        if (
            call.via not in SYSTEM_VIA
            and row.assignee is not None
            and not call.admin
            and not policy.assigned(call.by, row.assignee)
        ):
            member = " in it nor" if row.assignee.startswith(GROUP_PREFIX) else ""
            reasons.append(
                (row.id, f"is assigned to {row.assignee}; {call.by} is not{member} an admin")
            )
        edit = call.edits.get(row.id)
        if edit is not None:
            problem, value = parse_edit(types.get(row.type), row, edit, call.decision)
            if problem is not None:
                reasons.append((row.id, problem))
            elif value is not None:
                parsed[row.id] = value
        mismatch = _system_mismatch(call)
        if mismatch is not None:
            reasons.append((row.id, mismatch))
        elif call.via not in SYSTEM_VIA:
            draft = parsed.get(row.id) or row.edited_draft_json or row.draft_json
            refused = policy.refusal(
                call.by,
                "decide",
                row.type,
                _context(call, row, draft, run),
                about=("approval", row.id),
            )
            if refused is not None:
                reasons.append((row.id, refused))
            reasons += [(row.id, why) for why in _own_rules(call, row, draft, types, policy)]
    if reasons:
        raise DecisionRefused(reasons, by_policy=len(policy.found) == len(reasons))
    return parsed


def withdraw_refusals(
    call: DecideCall,
    locked: Sequence[Approval],
    locked_runs: Mapping[str, LockedRun],
    requesters: Mapping[str, str],
    policy: PolicyChecks,
) -> None:
    """Every reason to refuse withdrawing the gates of `call` (as `withdrawn`), raised
    together. `requesters` maps each run to whoever started it: the one who asked for its
    gates, who may withdraw them (as may an admin, `call.admin`), and whom the policies are
    told of (`withdraw` on the approval's type)."""
    reasons = _missing(call, locked)
    for row in locked:
        run = locked_runs.get(row.run_id)
        reasons += [(row.id, why) for why in _standing(row, run)]
        mismatch = _system_mismatch(call)
        if mismatch is not None:
            reasons.append((row.id, mismatch))
            continue
        requester = requesters.get(row.run_id, "")
        if not requester_or_admin(call.by, requester, admin=call.admin):
            # The reason names who may: the policies, asked too, would only say it again.
            reasons.append((row.id, not_the_requester(call.by, requester, row.run_id)))
            continue
        context = withdraw_context(
            call.by,
            requester,
            row.edited_draft_json or row.draft_json,
            workflow="" if run is None else run.workflow,
            input={} if run is None else run.input,
        )
        refused = policy.refusal(call.by, "withdraw", row.type, context, about=("approval", row.id))
        if refused is not None:
            reasons.append((row.id, refused))
    if reasons:
        by_policy = len(policy.found) == len(reasons)
        raise DecisionRefused(reasons, by_policy=by_policy, what="withdrawal")


def requester_or_admin(by: str, requester: str, *, admin: bool) -> bool:
    """Whether the rule that holds with or without policies lets `by` withdraw a gate of a
    run `requester` started: they are the requester, or an admin (`REMIT_ADMINS`)."""
    return admin or by == requester


def not_the_requester(by: str, requester: str, run_id: str) -> str:
    """Why `by` may not withdraw a gate of run `run_id`, which `requester` started, and who
    may."""
    return (
        f"was asked for by {requester or 'no one named'}, who started run {run_id}: only they "
        f"or an admin (REMIT_ADMINS) may withdraw it, not {by}"
    )


def withdraw_context(
    by: str, requester: str, draft: Mapping[str, Any], *, workflow: str, input: Any
) -> dict[str, Any]:
    """What the policies are told when `by` withdraws a gate whose draft stands as `draft`, in
    a run of `workflow` started with `input` by `requester`."""
    return {
        "requester": requester,
        "is_requester": by == requester,
        "workflow": workflow,
        "input": input,
        "draft": dict(draft),
    }


def _missing(call: DecideCall, locked: Sequence[Approval]) -> list[tuple[str, str]]:
    """The ids of `call` that name no approval, each with its reason."""
    found = {row.id for row in locked}
    return [
        (approval_id, "is not an approval: `remit approvals` lists them")
        for approval_id in call.ids
        if approval_id not in found
    ]


def _standing(row: Approval, run: LockedRun | None) -> list[str]:
    """Why no one may decide or withdraw the gate `row` as it stands: it is no longer pending,
    or its run has finished."""
    if row.status != "pending":
        by = f" by {row.decided_by}" if row.decided_by else ""
        return [f"is already {row.status}{by}"]
    if run is not None and run.status in FINISHED:
        return [f"belongs to run {row.run_id}, which is {run.status}"]
    return []


def _system_mismatch(call: DecideCall) -> str | None:
    """Why `call` mixes remit's own principals and channels with a person's, if it does."""
    if (call.via in SYSTEM_VIA) == call.by.startswith(SYSTEM_PREFIX):
        return None
    return (
        f"{call.by} via {call.via}: `{SYSTEM_PREFIX}` principals and the channels "
        f"{', '.join(sorted(SYSTEM_VIA))} are remit's own, and go together; decide "
        "as user:<name> or agent:<name>"
    )


def _own_rules(
    call: DecideCall,
    row: Approval,
    draft: Mapping[str, Any],
    types: Mapping[str, ApprovalType],
    policy: PolicyChecks,
) -> list[str]:
    """Why the rules of the gate's own type refuse the decision (`ApprovalType.refuse`, and
    the op its approval lets the run call, `ApprovalType.approves`)."""
    declared = types.get(row.type)
    if declared is None:
        return []
    found: list[str] = []
    if declared.refuse is not None:
        why = declared.refuse(call.by, call.decision, draft)
        if why is not None:
            found.append(why)
    if declared.approves is not None and call.decision == "approved":
        refused = policy.refusal(
            call.by, "call", declared.approves, {"input": dict(draft)}, about=("approval", row.id)
        )
        if refused is not None:
            found.append(f"approving it lets the run call `{declared.approves}`: {refused}")
    return found


def _context(
    call: DecideCall, row: Approval, draft: Mapping[str, Any], run: LockedRun | None
) -> dict[str, Any]:
    """What the policies are told of a decision on `row`."""
    return decide_context(
        call.decision,
        row.type,
        draft,
        workflow="" if run is None else run.workflow,
        input={} if run is None else run.input,
    )


def decide_context(
    decision: str,
    approval_type: str,
    draft: Mapping[str, Any],
    *,
    workflow: str,
    input: Any,
) -> dict[str, Any]:
    """What the policies are told of a decision `decision` on a gate of type `approval_type`
    whose draft would stand as `draft`, in a run of `workflow` started with `input`."""
    context: dict[str, Any] = {
        "decision": decision,
        "workflow": workflow,
        "input": input,
        "draft": dict(draft),
    }
    if approval_type == "call":  # a held direct call: its op, and the op's input
        context["op"] = draft.get("op", "")
        context["call"] = draft.get("input") or {}
    return context


def parse_edit(
    declared: ApprovalType | None, row: Approval, edit: Mapping[str, Any], decision: str
) -> tuple[str | None, dict[str, Any] | None]:
    """An edit's problem, or the draft it makes (parsed against the type's model)."""
    if decision != "approved":
        return f"has an edit, but only an approval carries edits, not {decision}", None
    if declared is None:
        return f"has an edit, but its type `{row.type}` is not declared in this app", None
    if not isinstance(edit, Mapping):
        return f"has an edit that is not an object of fields: {edit!r}", None
    if row.type == "call":  # a held direct call: its input may change, its op may not
        stored = row.draft_json
        if edit.get("op", stored.get("op")) != stored.get("op"):
            return "has an edit changing the op of a held call: only its input may change", None
        if isinstance(edit.get("input"), Mapping):
            edit = {**edit, "input": {**stored.get("input", {}), **edit["input"]}}
    draft_model: type[BaseModel] = declared.draft
    unknown = sorted(set(edit) - set(draft_model.model_fields))
    if unknown:
        return (
            f"has an edit naming fields {draft_model.__name__} does not have: "
            f"{', '.join(unknown)} (it has: {', '.join(draft_model.model_fields)})"
        ), None
    kept = read_only_changes(declared, row.draft_json, edit)
    if kept:
        return f"has an edit {read_only_refusal(declared, kept)}", None
    try:
        model = draft_model.model_validate({**row.draft_json, **edit})
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'draft'}: {e['msg']}" for e in error.errors()
        )
        return f"has an edit that does not parse as {draft_model.__name__}: {problems}", None
    return None, model.model_dump(mode="json")


def read_only_changes(
    declared: ApprovalType, draft: Mapping[str, Any], edit: Mapping[str, Any]
) -> list[str]:
    """The fields `declared` lets no decider change that `edit` would change in `draft` (as
    stored): a field given its value as it stands, as the model reads it, is no change."""
    named = [f for f in declared.read_only if f in edit and edit[f] != draft.get(f)]
    if not named:
        return []
    try:
        before = declared.draft.model_validate(draft)
        after = declared.draft.model_validate({**draft, **edit})
    except ValidationError:
        return named
    return [f for f in named if getattr(after, f) != getattr(before, f)]


def read_only_refusal(declared: ApprovalType, fields: Sequence[str]) -> str:
    """Why an edit changing `fields`, which `declared` keeps as the run proposed them, is
    refused, and what may be changed instead."""
    may = (
        f"a decider may change only {', '.join(declared.editable_fields)}"
        if declared.editable_fields
        else "a decider may change none of its fields: approve or reject it as it stands"
    )
    return (
        f"changing {', '.join(fields)}, which approval type `{declared.name}` keeps as the run "
        f"proposed {'it' if len(fields) == 1 else 'them'}: {may}"
    )
