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

from remit.core.schema import activity, approvals, ledger, runs, tasks
from remit.policy.cedar import HELD, denied

if TYPE_CHECKING:
    from remit.client import Client
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
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
        """The workflows whose runs the principal may read."""
        return self.client.guard.allowed(self.principal, "read_runs", self._declared)

    @cached_property
    def approval_types(self) -> frozenset[str] | None:
        """The approval types whose gates the principal may read."""
        types = [*self.client.app.approval_types, HELD]
        return self.client.guard.allowed(self.principal, "read_approvals", types)

    @cached_property
    def operations(self) -> bool:
        """Whether the principal may read the instance's operations."""
        allowed = self.client.guard.allowed(
            self.principal, "read_operations", [self.client.app.name]
        )
        return allowed is None or bool(allowed)

    @cached_property
    def _declared(self) -> list[str]:
        return [*self.client.app.workflows, HELD]

    # The conditions lists are read under.

    def _runs_only(self) -> sa.ColumnElement[bool] | None:
        """The runs the principal may read, as a condition on the runs table."""
        if self.workflows is None:
            return None
        readable = runs.c.workflow.in_(sorted(self.workflows))
        if not self.operations:
            return readable
        return sa.or_(readable, runs.c.workflow.not_in(self._declared))

    def _of_runs(self, run_id: sa.ColumnElement[Any]) -> sa.ColumnElement[bool] | None:
        """Rows whose `run_id` is a run the principal may read."""
        only = self._runs_only()
        if only is None:
            return None
        return run_id.in_(sa.select(runs.c.run_id).where(only))

    # Lists: only what may be read.

    def runs(self, **filters: Any) -> list[Run]:
        """`Client.runs`, of the workflows the principal may read."""
        return self.client.runs(**filters, only=self._runs_only())

    def approvals(self, **filters: Any) -> list[Approval[Any]]:
        """`Approvals.list`, of the approval types the principal may read."""
        types = self.approval_types
        only = None if types is None else approvals.c.type.in_(sorted(types))
        return self.client.approvals.list(**filters, only=only)

    def tasks(self, **filters: Any) -> list[Task]:
        """`Tasks.list`: the tasks of runs the principal may read."""
        return self.client.tasks.list(**filters, only=self._of_runs(tasks.c.run_id))

    def ledger(self, run_id: str | None = None, **filters: Any) -> list[LedgerRow]:
        """`Client.ledger`: one run's calls (refused unless the run may be read), or the
        latest calls of runs the principal may read, with direct calls' for operations."""
        if run_id is not None:
            self._runs_of(run_id)
            return self.client.ledger(run_id, **filters)
        only = self._of_runs(ledger.c.run_id)
        if only is not None and self.operations:
            direct = ledger.c.run_id.not_in(sa.select(runs.c.run_id))
            only = sa.or_(only, direct)
        return self.client.ledger(None, **filters, only=only)

    def activity(self, record_type: str, record_id: str, **filters: Any) -> list[Activity]:
        """`Client.activity`: the rows about runs the principal may read (and their gates and
        tasks), with the rows about no run (an archive) for operations."""
        only = self._of_runs(activity.c.run_id)
        if only is not None and self.operations:
            only = sa.or_(only, activity.c.run_id.is_(None))
        return self.client.activity(record_type, record_id, **filters, only=only)

    # Single things: refused, and recorded, when they may not be read.

    def run(self, run_id: str) -> Run:
        """The run, if the principal may read it (`PolicyDenied` otherwise)."""
        return self._runs_of(run_id)

    def approval(self, approval_id: str) -> Approval[Any]:
        """The approval, if the principal may read its type's gates."""
        found = self.client.approvals.get(approval_id)
        self._require("read_approvals", found.type, self.approval_types)
        return found

    def task(self, task_id: str) -> Task:
        """The task, if the principal may read its run."""
        found = self.client.tasks.get(task_id)
        self._runs_of(found.run_id)
        return found

    def require_operations(self) -> None:
        """Refuse (`PolicyDenied`, recorded) unless the principal may read the operations."""
        if not self.operations:
            self._refuse("read_operations", self.client.app.name)

    def _runs_of(self, run_id: str) -> Run:
        found = self.client.get_run(run_id)
        workflows = self.workflows
        gone = found.workflow not in self._declared  # read with the operations
        if not (workflows is None or found.workflow in workflows or (gone and self.operations)):
            self._refuse("read_runs", found.workflow)
        return found

    def _require(self, action: Any, resource: str, allowed: frozenset[str] | None) -> None:
        if allowed is None or resource in allowed:
            return
        self._refuse(action, resource)

    def _refuse(self, action: Any, resource: str) -> NoReturn:
        """Ask the policies once more, recording the refusal as any act's, and raise it."""
        self.client.guard.require(self.principal, action, resource, {})
        raise denied(self.principal, action, resource, "no policy permits it")
