"""The client's rooms for people's work: `client.approvals` (the gates runs wait at, and their
decisions), `client.tasks` (writes whose outcome a person confirms) and `client.records` (what
happened about one of the business's records, and archiving it)."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from remit.core import limits
from remit.core.acting import Acting, no_nul, not_in_a_workflow

if TYPE_CHECKING:
    import sqlalchemy as sa

    from remit.core.runs import RunStore
    from remit.people.activity import Activity
    from remit.people.approvals import Approval, Approvals, Archived, DecideResult
    from remit.people.inbox import Decidable
    from remit.people.tasks import Resolved, Task, Tasks
    from remit.policy.guard import Guard


class PeopleServices(Protocol):
    """The client's services these rooms use."""

    @property
    def approvals(self) -> Approvals: ...
    @property
    def tasks(self) -> Tasks: ...
    @property
    def runs(self) -> RunStore: ...
    @property
    def guard(self) -> Guard: ...


class PeopleClient(Acting, Protocol):
    """The client as these rooms see it."""

    @property
    def services(self) -> PeopleServices: ...


class ApprovalsRoom:
    """`client.approvals`: the app's gates, and deciding them."""

    def __init__(self, client: PeopleClient) -> None:
        self._client = client

    def list(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> builtins.list[Approval[Any]]:
        """Approvals, newest first."""
        limits.check_limit(limit, where="approvals.list")
        no_nul("approvals.list", status=status, run_id=run_id)
        return self._client.services.approvals.list(status=status, run_id=run_id, limit=limit)

    def decidable(
        self, *, by: str | None = None, limit: int = 500, approval_id: str | None = None
    ) -> builtins.list[Decidable]:
        """The pending gates `by` may decide, oldest first, each with its run and the decisions
        the policies let them give (see `people/inbox.py`); asking records no denial.
        `approval_id`: that gate alone, if `by` may decide it."""
        from remit.people.inbox import decidable

        limits.check_limit(limit, where="approvals.decidable")
        who = self._client.person(by)
        if approval_id is not None:
            pending = [self._client.services.approvals.get(approval_id)]
        else:
            # The oldest first, so that with more pending than `limit` the oldest are not the
            # ones left out.
            pending = self._client.services.approvals.list(
                status="pending", limit=limit, oldest_first=True
            )
        return decidable(
            self._client.db,
            pending,
            self._client.services.runs,
            self._client.services.guard,
            by=who,
            admin=who in self._client.settings.admins,
        )

    def get(self, approval_id: str) -> Approval[Any]:
        """One approval; `ApprovalNotFound` if there is none."""
        return self._client.services.approvals.get(approval_id)

    def decide(
        self,
        ids: Iterable[str] | str,
        decision: str,
        *,
        key: str,
        edits: Mapping[str, Mapping[str, Any]] | None = None,
        reason: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> DecideResult:
        """Decide approvals, all or none, and resume their runs (see `Approvals.decide`). `key`
        is the decision key: the same key again replays the first result."""
        not_in_a_workflow("approvals.decide")
        decided = self._client.services.approvals.decide(
            ids,
            decision,
            by=self._client.who(by),
            via=via,
            decision_key=key,
            edits=edits,
            reason=reason,
        )
        self._client.written()
        return decided

    def withdraw(
        self,
        approval_id: str,
        *,
        key: str | None = None,
        reason: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> DecideResult:
        """Withdraw a pending gate as whoever asked for it, as the policies allow (`withdraw`),
        and resume its run, which reads the gate as `withdrawn` (see `Approvals.withdraw`).
        `key` makes it idempotent (default: a new one): the same key again replays the first
        result."""
        not_in_a_workflow("approvals.withdraw")
        no_nul("approvals.withdraw", approval_id=approval_id)
        withdrawn = self._client.services.approvals.withdraw(
            approval_id,
            by=self._client.person(by),
            via=via,
            key=key or f"withdraw:{uuid.uuid4().hex}",
            reason=reason,
        )
        self._client.written()
        return withdrawn

    def may_withdraw(self, approval_id: str, *, by: str | None = None) -> bool:
        """Whether `by` may withdraw the pending gate `approval_id` now: they started its run
        or are an admin (REMIT_ADMINS), and the policies, if any, let them (asking records no
        denial); False for a gate no longer pending."""
        from remit.people.inbox import may_withdraw

        approval = self._client.services.approvals.get(approval_id)
        run = self._client.services.runs.find(approval.run_id)
        if run is None:
            return False
        guard, who = self._client.services.guard, self._client.person(by)
        admin = who in self._client.settings.admins
        return may_withdraw(guard, who, approval, run, admin=admin)

    def audit(self, approval_id: str) -> builtins.list[dict[str, Any]]:
        """Who did what to the approval, oldest first."""
        return self._client.services.approvals.audit(approval_id)


class TasksRoom:
    """`client.tasks`: the app's tasks, and answering them."""

    def __init__(self, client: PeopleClient) -> None:
        self._client = client

    def list(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        oldest_first: bool = False,
    ) -> builtins.list[Task]:
        """Tasks, newest first (or oldest first)."""
        limits.check_limit(limit, where="tasks.list")
        no_nul("tasks.list", status=status, run_id=run_id)
        return self._client.services.tasks.list(
            status=status, run_id=run_id, limit=limit, oldest_first=oldest_first
        )

    def get(self, task_id: str) -> Task:
        """One task; `TaskNotFound` if there is none."""
        return self._client.services.tasks.get(task_id)

    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Resolved:
        """Say whether a task's call happened, and carry its run on (see `Tasks.resolve`)."""
        not_in_a_workflow("tasks.resolve")
        resolved = self._client.services.tasks.resolve(
            task_id, done=done, output=output, by=self._client.who(by), key=key
        )
        self._client.written()
        return resolved

    def audit(self, task_id: str) -> builtins.list[dict[str, Any]]:
        """Who did what to the task, oldest first."""
        return self._client.services.tasks.audit(task_id)


class RecordsRoom:
    """`client.records`: the business's records, as the runs about them left them."""

    def __init__(self, client: PeopleClient) -> None:
        self._client = client

    def activity(
        self,
        record_type: str,
        record_id: str,
        *,
        limit: int = 100,
        after: int | None = None,
        only: sa.ColumnElement[bool] | None = None,
    ) -> builtins.list[Activity]:
        """What happened about one of the business's records (e.g. `"invoice", "inv_1003"`),
        oldest first: the runs about it started and ended, its gates opened and decided, its
        writes whose outcome became unknown and their tasks answered, its archiving. At most
        `limit` rows, those after the row `after` (an id) when given. See `people/activity.py`.
        """
        from remit.people.activity import timeline

        limits.check_limit(limit, where="records.activity")
        no_nul("records.activity", record_type=record_type, record_id=record_id)
        return timeline(
            self._client.db,
            self._client.app_name,
            (record_type, record_id),
            limit=limit,
            after=after,
            only=only,
        )

    def archive(
        self,
        record_type: str,
        record_id: str,
        *,
        by: str | None = None,
        reason: str | None = None,
    ) -> Archived:
        """Cancel every pending gate about a record, as one decision `cancelled` via `archive`,
        and return what it cancelled (nothing, when none was pending: a second archive does
        nothing). The policies check it as they check any decision: `decide` on each gate's
        approval type with the decision `cancelled`; a refusal cancels none. Each run waiting
        at one of the gates resumes and sees it cancelled. See `Approvals.archive`."""
        not_in_a_workflow("records.archive")
        archived = self._client.services.approvals.archive(
            self._client.app_name,
            (record_type, record_id),
            by=self._client.person(by),
            reason=reason,
        )
        self._client.written()
        return archived
