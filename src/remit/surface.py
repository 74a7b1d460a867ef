"""What the command line asks of a client: the verbs a `remit.Client` answers on the app's
database, and a `remit.remote.RemoteClient` answers the same through the HTTP API (`REMIT_URL`
and `REMIT_TOKEN`), as the token's principal.

The command line is written against this protocol only, so every command that reads or acts
on an app works either way; the type checker holds both clients to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from remit.budgets.model import PeriodState
    from remit.client import IdKind, Step
    from remit.connectors.credentials import SecretInfo
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.core.settings import Settings
    from remit.execution.direct import CallResult
    from remit.ops.concluding import Report
    from remit.ops.deadlines import Deadline
    from remit.ops.registry import WorkerRow
    from remit.ops.retries import Retried
    from remit.people.activity import Activity
    from remit.people.approvals import Approval, DecideResult
    from remit.people.tasks import Resolved, Task
    from remit.policy.guard import Denial
    from remit.policy.signin import LinkInfo
    from remit.policy.tokens import TokenInfo


class Surface(Protocol):
    """The verbs of a client, local or remote. `by` is who acts: on a local client any
    principal the policies then check (default: the client's own); through the HTTP API only
    the token's principal, so a remote client refuses any other."""

    settings: Settings

    @property
    def app_name(self) -> str: ...

    # Runs.
    def start_row(
        self, workflow: str, input: Mapping[str, Any] | BaseModel, *, by: str | None = None
    ) -> Run: ...
    def get_run(self, run_id: str) -> Run: ...
    def runs(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 50
    ) -> list[Run]: ...
    def find_id(self, kind: IdKind, given: str) -> str: ...
    def steps(self, run_id: str) -> list[Step]: ...
    def cancel(self, run_id: str, *, by: str | None = None) -> Run: ...
    def retry(
        self,
        run_id: str,
        *,
        from_step: int | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Retried: ...

    # People.
    def list_approvals(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> list[Approval[Any]]: ...
    def get_approval(self, approval_id: str) -> Approval[Any]: ...
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
    ) -> DecideResult: ...
    def list_tasks(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> list[Task]: ...
    def get_task(self, task_id: str) -> Task: ...
    def activity(
        self, record_type: str, record_id: str, *, limit: int = 100, after: int | None = None
    ) -> list[Activity]: ...
    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Resolved: ...

    # Ops, data and money.
    def call(
        self, op_id: str, input: Mapping[str, Any], *, key: str | None = None, by: str | None = None
    ) -> CallResult: ...
    def ledger(self, run_id: str | None = None, *, limit: int = 200) -> list[LedgerRow]: ...
    def budget_periods(self, *, limit: int = 50) -> list[tuple[PeriodState, Decimal]]: ...
    def set_budget(
        self,
        scope: str,
        limit: Decimal | int | str,
        *,
        period: str | None = None,
        by: str | None = None,
    ) -> PeriodState: ...
    def list_secrets(self) -> list[SecretInfo]: ...
    def set_secret(self, name: str, value: str, *, by: str | None = None) -> SecretInfo: ...
    def delete_secret(self, name: str, *, by: str | None = None) -> bool: ...

    # Policies and access.
    def denials(self, *, limit: int = 100) -> list[Denial]: ...
    def create_token(
        self,
        principal: str,
        *,
        name: str = "",
        expires_in: timedelta | None = None,
        by: str | None = None,
    ) -> tuple[TokenInfo, str]: ...
    def list_tokens(self, *, by: str | None = None) -> list[TokenInfo]: ...
    def revoke_token(self, token_id: str, *, by: str | None = None) -> TokenInfo: ...
    def login_link(
        self, principal: str, *, expires_in: timedelta | None = None, by: str | None = None
    ) -> tuple[LinkInfo, str]: ...
    def set_password(self, principal: str, password: str, *, by: str | None = None) -> None: ...

    # Running the app.
    def pause(self, *, by: str | None = None) -> list[str]: ...
    def resume(self, *, by: str | None = None) -> tuple[list[str], list[str]]: ...
    def reconcile(self, *, dry_run: bool = False, by: str | None = None) -> Report: ...
    def deadlines(self, limit: int = 20) -> list[Deadline]: ...
    def workers(self) -> list[WorkerRow]: ...
