"""What one principal may read of an app, for the surfaces that read on someone's behalf: the
HTTP API (a token's principal) and the web console (whoever signed in).

The policies decide reads as they decide acts, with three actions:

    Action::"read_runs"        on Workflow::"<name>"      the workflow's runs: their input,
                                                          output and steps, their ledger rows,
                                                          their tasks (with what the call was
                                                          sent) and their activity
    Action::"read_approvals"   on ApprovalType::"<name>"  the type's gates: drafts and audit
    Action::"read_operations"  on App::"<app>"            the instance: audit, denials, workers,
                                                          budgets, deadlines, secret names, the
                                                          ledger rows of direct calls, and runs
                                                          of workflows the app no longer has

The runs of the operator agent's built-in `chat` hold a person's chat (its question, what the
agent read for them, its answer), so they are read as the chat is: by whoever started them, or
with `Action::"read_chats"` on the app, whatever `read_runs` says.

A list holds only the rows the principal may read. The policies are asked once for each
distinct resource (each workflow, each approval type), never once a row, and what they allow
becomes a condition of the list's query, so a page is as full as the principal's reading
allows. A list refuses nothing and records nothing. A single thing the principal may not read
(a run, an approval, a task, a run's ledger, the operations) is refused with `PolicyDenied`, and
the refusal is recorded among the denials, as for an act.

An app without policies reads everything to everyone, as it acts. The command line on the
app's own database reads everything: whoever runs it can open the database itself.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

import sqlalchemy as sa

from remit.core.audit import audit_row
from remit.core.schema import activity, approvals, ledger, runs, tasks
from remit.policy.cedar import CHAT, HELD, denied

if TYPE_CHECKING:
    from remit.client import Client, IdKind
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.ops.messages import Child
    from remit.people.activity import Activity
    from remit.people.approvals import Approval
    from remit.people.tasks import Task


class Reader:
    """The reads of `principal` on `client`'s app, as the policies allow them."""

    def __init__(self, client: Client, principal: str) -> None:
        self.client = client
        self.principal = principal

    # What the policies allow: None is everything (the app has no policies).

    @cached_property
    def workflows(self) -> frozenset[str] | None:
        """The workflows whose runs the principal may read (those of `chat` apart: see
        `chats`)."""
        allowed = self.client.services.guard.allowed(self.principal, "read_runs", self._declared)
        if allowed is None or CHAT not in self.client.app.workflows:
            return allowed
        if self.chats:
            return allowed | {CHAT}
        return allowed - {CHAT}

    @cached_property
    def chats(self) -> bool:
        """Whether the principal may read others' chats, and so every run of `chat`."""
        allowed = self.client.services.guard.allowed(
            self.principal, "read_chats", [self.client.app.name]
        )
        return allowed is None or bool(allowed)

    @cached_property
    def approval_types(self) -> frozenset[str] | None:
        """The approval types whose gates the principal may read."""
        return self.client.services.guard.allowed(self.principal, "read_approvals", self._types)

    @cached_property
    def operations(self) -> bool:
        """Whether the principal may read the instance's operations."""
        allowed = self.client.services.guard.allowed(
            self.principal, "read_operations", [self.client.app.name]
        )
        return allowed is None or bool(allowed)

    @cached_property
    def _declared(self) -> list[str]:
        return [*self.client.app.workflows, HELD]

    @cached_property
    def _types(self) -> list[str]:
        return [*self.client.app.approval_types, HELD]

    # The conditions lists are read under: None for no condition (everything may be read).

    def runs_only(self) -> sa.ColumnElement[bool] | None:
        """The runs the principal may read, as a condition on the runs table: those of the
        workflows they may read, and of workflows the app no longer has for the operations,
        and the turns of their own chats."""
        only = _within(runs.c.workflow, self.workflows, self._declared, operations=self.operations)
        if only is None or self.workflows is None or CHAT in self.workflows:
            return only
        return sa.or_(only, sa.and_(runs.c.workflow == CHAT, runs.c.started_by == self.principal))

    def approvals_only(self) -> sa.ColumnElement[bool] | None:
        """The approvals the principal may read: of the types they may read, and of types the
        app no longer has for the operations."""
        return _within(
            approvals.c.type, self.approval_types, self._types, operations=self.operations
        )

    def of_runs(self, run_id: sa.ColumnElement[Any]) -> sa.ColumnElement[bool] | None:
        """Rows whose `run_id` is a run the principal may read, or (for the operations) is
        no run at all: a direct call's."""
        only = self.runs_only()
        if only is None:
            return None
        readable = sa.exists().where(runs.c.run_id == run_id, only)
        if not self.operations:
            return readable
        return sa.or_(readable, ~sa.exists().where(runs.c.run_id == run_id))

    # Lists: only what may be read.

    def runs(self, **filters: Any) -> list[Run]:
        """`client.runs.list`, of the workflows the principal may read."""
        return self.client.runs.list(**filters, only=self.runs_only())

    def children(self, run_id: str) -> list[Child]:
        """`client.runs.children`: the child runs of `run_id` the principal may read (its
        own reading is checked apart, with `run`)."""
        return [
            child
            for child in self.client.runs.children(run_id)
            if self.may_read_runs_of(child.workflow)
        ]

    def approvals(self, **filters: Any) -> list[Approval[Any]]:
        """`Approvals.list`, of the approval types the principal may read."""
        return self.client.services.approvals.list(**filters, only=self.approvals_only())

    def tasks(self, **filters: Any) -> list[Task]:
        """`Tasks.list`: the tasks of runs the principal may read (of direct calls, for the
        operations)."""
        return self.client.services.tasks.list(**filters, only=self.of_runs(tasks.c.run_id))

    def ledger(self, run_id: str | None = None, **filters: Any) -> list[LedgerRow]:
        """`client.calls.ledger`: one run's calls, or one direct call's (refused unless they may be
        read), or the latest calls the principal may read."""
        if run_id is not None:
            self._require_run(run_id)
            return self.client.calls.ledger(run_id, **filters)
        return self.client.calls.ledger(None, **filters, only=self.of_runs(ledger.c.run_id))

    def activity(self, record_type: str, record_id: str, **filters: Any) -> list[Activity]:
        """`client.records.activity`: the rows about runs the principal may read (and their gates and
        tasks), with the rows about no run (an archive) for the operations."""
        return self.client.records.activity(
            record_type, record_id, **filters, only=self.of_runs(activity.c.run_id)
        )

    def find_id(self, kind: IdKind, given: str) -> str:
        """`Client.find_id`, where a prefix matches only what the principal may read: a
        prefix names no id of anything else. A whole id is found whatever it is, for its read
        to be refused (403, and a denial row)."""
        if kind == "run":
            only = self.runs_only()
        elif kind == "approval":
            only = self.approvals_only()
        else:
            only = self.of_runs(tasks.c.run_id)
        return self.client.find_id(kind, given, only=only)

    def may_read_runs_of(self, workflow: str) -> bool:
        """Whether the principal may read the runs of `workflow`, as `runs_only` has it."""
        if self.workflows is None or workflow in self.workflows:
            return True
        return workflow not in self._declared and self.operations

    # Single things: refused, and recorded, when they may not be read.

    def run(self, run_id: str) -> Run:
        """The run, if the principal may read it (`PolicyDenied` otherwise)."""
        found = self.client.runs.get(run_id)
        self._require_run_row(found)
        return found

    def approval(self, approval_id: str) -> Approval[Any]:
        """The approval, if the principal may read its type's gates."""
        found = self.client.services.approvals.get(approval_id)
        self._require("read_approvals", found.type, self.approval_types, self._types)
        return found

    def task(self, task_id: str) -> Task:
        """The task, if the principal may read its run (a direct call's: the operations)."""
        found = self.client.services.tasks.get(task_id)
        self._require_run(found.run_id)
        return found

    def require_operations(self) -> None:
        """Refuse (`PolicyDenied`, recorded) unless the principal may read the operations."""
        if not self.operations:
            self._refuse("read_operations", self.client.app.name)

    def _require_run(self, run_id: str) -> None:
        """Refuse unless the principal may read the run `run_id`, or, where no run has that
        id (a direct call's), the operations."""
        if self.workflows is None:
            return
        found = self.client.services.runs.find(run_id)
        if found is None:
            self.require_operations()
        else:
            self._require_run_row(found)

    def _require_run_row(self, run: Run) -> None:
        """Refuse unless the principal may read `run`: a turn of a chat is its starter's, or
        read with `read_chats`."""
        workflow, started_by = run.workflow, run.started_by
        if workflow == CHAT and started_by == self.principal:
            return  # a turn of their own chat
        if workflow != CHAT or self.workflows is None:
            self._require("read_runs", workflow, self.workflows, self._declared)
            return
        if not self.chats:
            self._refuse("read_chats", self.client.app.name)
        # Another's chat read: recorded, as `remit.agent` records each.
        with self.client.db.begin() as conn:
            audit_row(
                conn,
                at=self.client.clock.now(),
                actor=self.principal,
                action="read_chats",
                target=run.run_id,
                meta={"owner": started_by},
            )

    def _require(
        self, action: Any, resource: str, allowed: frozenset[str] | None, declared: list[str]
    ) -> None:
        """Refuse unless `resource` is among what the principal may `action` (`allowed`), or is
        a name the app no longer declares and they may read the operations (as `_within`)."""
        if allowed is None or resource in allowed:
            return
        if resource not in declared:
            self.require_operations()
            return
        self._refuse(action, resource)

    def _refuse(self, action: Any, resource: str) -> NoReturn:
        """Ask the policies once more, recording the refusal as any act's, and raise it."""
        self.client.services.guard.require(self.principal, action, resource, {})
        raise denied(self.principal, action, resource, "no policy permits it")


def _within(
    column: sa.ColumnElement[str],
    allowed: frozenset[str] | None,
    declared: list[str],
    *,
    operations: bool,
) -> sa.ColumnElement[bool] | None:
    """`column` among `allowed`, or (with the operations) among no longer `declared` names;
    None when that is every row."""
    if allowed is None or (operations and set(declared) <= allowed):
        return None
    readable = column.in_(sorted(allowed))
    if not operations:
        return readable
    return sa.or_(readable, column.not_in(declared))
