"""The operator agent's tools: the client's verbs, as the person who asks.

Read tools answer from the live instance through `remit.reads.Reader` for the chat's owner, so
the policies limit what the agent sees exactly as they limit that person: a run they may not
read is refused to the agent too, with the policy's reason, and a list holds only what they may
read. Each read is one checkpointed step of the turn's run, so a turn carried on after its
worker died reads the record, not the instance again.

Act tools are never run by the agent. Calling one ends the turn with the act as the chat's
draft (Pydantic AI's deferred tools: `requires_approval`); the person confirms it, and only then
does it run, through the client, as that person, under the policies (`room.py`).

What a vendor returned reaches the model as data inside a tool's answer, never as an
instruction: nothing in it can act, since every act waits for the person.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from remit.agent.models import Act

if TYPE_CHECKING:
    from remit.client import Client
    from remit.reads import Reader

# The most characters of one tool answer the model is given: a run's input or a ledger can be
# long, and every character is paid for.
MOST_ANSWER = 6000
# The most rows a list tool answers with.
MOST_ROWS = 20


class Reads:
    """The read tools' bodies for one person (see the module)."""

    def __init__(self, client: Client, reader: Reader) -> None:
        self.client = client
        self.reader = reader

    def find_runs(
        self,
        workflow: str | None = None,
        status: str | None = None,
        record: str | None = None,
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        """Runs, newest first: of a workflow, a status (running, waiting, sleeping, done,
        failed, cancelled), or a business record given as `type/id` (invoice/inv_1003)."""
        named = None
        if record:
            kind, _, key = record.partition("/")
            if not key:
                raise ValueError(f"a record is `type/id`, such as invoice/inv_1003, not {record!r}")
            named = (kind, key)
        found = self.reader.runs(
            workflow=workflow or None,
            status=status or None,
            record=named,
            limit=max(1, min(limit, MOST_ROWS)),
        )
        return [_run_line(run) for run in found]

    def show_run(self, run_id: str) -> dict[str, Any]:
        """One run: its input, status, output or error, its steps, and what it waits for."""
        run = self.reader.run(self.client.find_id("run", run_id))
        steps = self.client.runs.steps(run.run_id)
        return {
            **_run_line(run),
            "input": run.input,
            "output": run.output,
            "error": run.error,
            "steps": [
                {"position": step.function_id, "name": step.name, "error": step.error}
                for step in steps[-MOST_ROWS:]
            ],
            "waiting_for": self._waits(run.run_id),
        }

    def why_waiting(self, run_id: str) -> dict[str, Any]:
        """What a run waits for and for whom: its open approvals (type, title, assignee, draft,
        the fields a decider may edit, expiry), its open tasks and other waits (a message, its
        child runs)."""
        run = self.reader.run(self.client.find_id("run", run_id))
        return {**_run_line(run), "waiting_for": self._waits(run.run_id)}

    def list_approvals(self, pending_only: bool = True) -> list[dict[str, Any]]:
        """Approvals the person may read, newest first (only the pending ones by default)."""
        found = self.reader.approvals(status="pending" if pending_only else None, limit=MOST_ROWS)
        return [_approval(found_one) for found_one in found]

    def list_tasks(self, open_only: bool = True) -> list[dict[str, Any]]:
        """Tasks (a person must say whether a call happened) of runs the person may read."""
        found = self.reader.tasks(status="open" if open_only else None, limit=MOST_ROWS)
        return [_compact(task.as_json()) for task in found]

    def ledger(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """The ledger's calls: one run's, or the latest the person may read, with their cost."""
        rows = self.reader.ledger(
            self.client.find_id("run", run_id) if run_id else None, limit=MOST_ROWS
        )
        return [
            {
                "run_id": row.run_id,
                "op": row.op_id,
                "status": row.status,
                "cost_usd": row.cost,
                "error": row.error,
                "at": row.started_at,
            }
            for row in rows
        ]

    def budgets(self) -> list[dict[str, Any]]:
        """The budgets' periods: limit, spent and reserved, in USD (needs `read_operations`)."""
        self.reader.require_operations()
        return [
            {
                "scope": state.scope,
                "period": state.period,
                "limit_usd": state.limit_usd,
                "spent_usd": state.spent_usd,
                "reserved_usd": state.reserved_usd,
                "left_usd": max(Decimal(0), state.limit_usd - state.spent_usd - state.reserved_usd),
            }
            for state, _ in self.client.budgets.periods(limit=MOST_ROWS)
        ]

    def deadlines(self) -> list[dict[str, Any]]:
        """What comes due next: gates' expiries, sleeps, waits' timeouts (needs
        `read_operations`)."""
        self.reader.require_operations()
        return [_compact(dict(deadline.__dict__)) for deadline in self.client.ops.deadlines(20)]

    def explain_policy(
        self,
        principal: str,
        action: str,
        resource: str,
        context: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Whether the policies allow `principal` (user:ann) to take `action` (start, decide,
        call, cancel, retry, ...) on `resource` (a workflow, approval type or op), with
        `context` (for decide: decision, draft, input), and which policy says so. Asks only:
        records nothing. Asked about another principal, it answers for one who started a
        run the person may read, or for anyone to a person who may read the operations."""
        from remit.policy.cedar import ACTIONS

        other = principal != self.reader.principal and not self.reader.operations
        if other and not self.reader.runs(started_by=principal, limit=1):
            raise ValueError(
                f"you may ask what the policies say of yourself ({self.reader.principal}) or "
                f"of who started a run you may read, not of {principal}"
            )

        if action not in ACTIONS:
            raise ValueError(f"{action!r} is not an action the policies know: {', '.join(ACTIONS)}")
        policy = self.client.app.policy
        verdict = policy.check(principal, action, resource, context or {})
        said: dict[str, Any] = {
            "allowed": verdict.allowed,
            "held_for_approval": verdict.held,
            "reason": verdict.reason,
            "policies": list(verdict.policies),
        }
        if (
            not verdict.allowed
            and action == "decide"
            and (context or {}).get("decision") != "rejected"
        ):
            # What they may do instead: a refused approval is often a rejection allowed, by a
            # policy whose condition the approval failed.
            rejecting = policy.check(
                principal, action, resource, {**(context or {}), "decision": "rejected"}
            )
            said["if_rejected"] = {"allowed": rejecting.allowed, "reason": rejecting.reason}
        return said

    def _waits(self, run_id: str) -> list[dict[str, Any]]:
        waits: list[dict[str, Any]] = []
        for gate in self.reader.approvals(run_id=run_id, status="pending", limit=MOST_ROWS):
            waits.append({"kind": "approval", **_approval(gate)})
        for task in self.client.services.tasks.list(run_id=run_id, status="open", limit=10):
            waits.append({"kind": "task", **_compact(task.as_json())})
        for waiting in self.client.runs.waiting(run_id):
            waits.append(_compact(waiting.as_json()))
        return waits


def _run_line(run: Any) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status,
        "started_by": run.started_by,
        "created_at": run.created_at,
    }


def _approval(gate: Any) -> dict[str, Any]:
    return {
        "approval_id": gate.id,
        "run_id": gate.run_id,
        "type": gate.type,
        "title": gate.title,
        "status": gate.status,
        "assignee": gate.assignee,
        "draft": gate.draft_json,
        "editable": gate.editable,
        "expires_at": gate.expires_at,
    }


def _compact(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in row.items() if value not in (None, "", [], {})}


def answer_text(value: Any) -> str:
    """A tool's answer as the model is given it: JSON, cut at `MOST_ANSWER` characters."""
    text = json.dumps(value, default=_plain, sort_keys=False)
    if len(text) > MOST_ANSWER:
        text = text[:MOST_ANSWER] + f"... (cut at {MOST_ANSWER} characters)"
    return text


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


READ_TOOLS: tuple[str, ...] = (
    "find_runs",
    "show_run",
    "why_waiting",
    "list_approvals",
    "list_tasks",
    "ledger",
    "budgets",
    "deadlines",
    "explain_policy",
)


# The act tools, as the model sees them: each only proposes the act. Their bodies never run.


def start_run(workflow: str, input: dict[str, Any]) -> str:
    """Propose starting a run of `workflow` with `input`. The person confirms it (and may try
    it on fresh fakes first); it does not run now."""
    raise AssertionError("an act tool is never run by the agent")


def decide(
    approval_id: str,
    decision: Literal["approved", "rejected"],
    edit: dict[str, Any] | None = None,
    reason: str | None = None,
) -> str:
    """Propose deciding an approval: approved or rejected, with the draft's fields to change
    (`edit`, e.g. {"amount": 40000} in cents) and a reason. The person confirms it."""
    raise AssertionError("an act tool is never run by the agent")


def resolve_task(task_id: str, done: bool) -> str:
    """Propose answering a task: whether the call it asks about happened (`done`)."""
    raise AssertionError("an act tool is never run by the agent")


def retry_run(run_id: str) -> str:
    """Propose retrying a failed or cancelled run on the current code."""
    raise AssertionError("an act tool is never run by the agent")


def cancel_run(run_id: str) -> str:
    """Propose cancelling a run that has not finished."""
    raise AssertionError("an act tool is never run by the agent")


def send_message(run_id: str, topic: str, payload: Any = None) -> str:
    """Propose sending `payload` to a run on `topic` (what it waits for with wait_for)."""
    raise AssertionError("an act tool is never run by the agent")


ACT_TOOLS: dict[str, tuple[Act, Callable[..., str]]] = {
    "start_run": ("start", start_run),
    "decide": ("decide", decide),
    "resolve_task": ("resolve", resolve_task),
    "retry_run": ("retry", retry_run),
    "cancel_run": ("cancel", cancel_run),
    "send_message": ("send", send_message),
}


def summary(act: Act, args: Mapping[str, Any]) -> str:
    """The line a person reads for a draft."""
    if act == "start":
        return f"Start {args.get('workflow')} with {json.dumps(args.get('input') or {})}"
    if act == "decide":
        verb = "Approve" if args.get("decision") == "approved" else "Reject"
        edit = args.get("edit")
        changed = f", changing {json.dumps(edit)}" if edit else ""
        why = f" ({args['reason']})" if args.get("reason") else ""
        return f"{verb} {args.get('approval_id')}{changed}{why}"
    if act == "resolve":
        said = "happened" if args.get("done") else "did not happen"
        return f"Answer task {args.get('task_id')}: the call {said}"
    if act == "retry":
        return f"Retry run {args.get('run_id')}"
    if act == "cancel":
        return f"Cancel run {args.get('run_id')}"
    return (
        f"Send {json.dumps(args.get('payload'))} to run {args.get('run_id')} "
        f"on topic {args.get('topic')}"
    )
