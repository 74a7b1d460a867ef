"""What the command line asks of a client: the rooms and verbs a `remit.Client` answers on the
app's database, and a `remit.remote.RemoteClient` answers the same through the HTTP API
(`REMIT_URL` and `REMIT_TOKEN`), as the token's principal.

The command line is written against this protocol only, so every command that reads or acts
on an app works either way; the type checker holds both clients to it, room by room.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from remit.agent.models import Chat, ChatMessage, ChatView
    from remit.budgets.model import PeriodState
    from remit.changes.store import Change, Deploy
    from remit.client import IdKind
    from remit.connectors.credentials import SecretInfo
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.core.settings import Settings
    from remit.execution.direct import CallResult
    from remit.ops.concluding import Report
    from remit.ops.deadlines import Deadline
    from remit.ops.messages import Child, Message, Sent, Waiting
    from remit.ops.registry import WorkerRow
    from remit.ops.retries import Retried
    from remit.ops.runs import Step
    from remit.ops.schedules import ScheduleState
    from remit.people.activity import Activity
    from remit.people.approvals import Approval, DecideResult
    from remit.people.tasks import Resolved, Task
    from remit.policy.guard import Denial
    from remit.policy.signin import LinkInfo
    from remit.policy.tokens import TokenInfo


class RunsSurface(Protocol):
    """`client.runs`."""

    def start_row(
        self,
        workflow: str,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        key: str | None = None,
    ) -> Run: ...
    def get(self, run_id: str) -> Run: ...
    def list(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 50,
        started_by: str | None = None,
        record: tuple[str, str] | None = None,
        since: datetime | None = None,
        parent: str | None = None,
    ) -> builtins.list[Run]: ...
    def steps(self, run_id: str) -> builtins.list[Step]: ...
    def send(
        self,
        run_id: str,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> Sent: ...
    def state(self, run_id: str) -> dict[str, Any]: ...
    def messages(self, run_id: str) -> builtins.list[Message]: ...
    def waiting(self, run_id: str) -> builtins.list[Waiting]: ...
    def children(self, run_id: str) -> builtins.list[Child]: ...
    def parent(self, run_id: str) -> Child | None: ...
    def cancel(self, run_id: str, *, by: str | None = None) -> Run: ...
    def retry(
        self,
        run_id: str,
        *,
        from_step: int | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Retried: ...


class ChangesSurface(Protocol):
    """`client.changes`."""

    def open(
        self,
        branch: str,
        *,
        title: str = "",
        base: str = "main",
        by: str | None = None,
        key: str | None = None,
    ) -> Change: ...
    def list(self, *, branch: str | None = None, limit: int = 50) -> builtins.list[Change]: ...
    def get(self, change_id: str) -> Change: ...
    def deploys(
        self, *, host: str | None = None, change_id: str | None = None, limit: int = 50
    ) -> builtins.list[Deploy]: ...


class ChatsSurface(Protocol):
    """A person's chats with the operator agent: `remit.agent.Chats(client)` on the database,
    `RemoteClient.chats` through the HTTP API. (Not a room of `Surface`: `remit.agent` sits
    above `remit.client`, so a local client has no `chats`; the command line makes one.)"""

    def open(self, *, title: str = "", by: str | None = None) -> Chat: ...
    def list(
        self, *, owner: str | None = None, limit: int = 50, by: str | None = None
    ) -> builtins.list[Chat]: ...
    def get(self, chat_id: str, *, by: str | None = None) -> ChatView: ...
    def messages(
        self, chat_id: str, *, after: int = 0, by: str | None = None
    ) -> builtins.list[ChatMessage]: ...
    def say(self, chat_id: str, text: str, *, by: str | None = None) -> str: ...
    def wait(self, chat_id: str, *, timeout: float = 120.0, by: str | None = None) -> ChatView: ...
    def confirm(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage: ...
    def discard(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage: ...
    def sandbox(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage: ...


class ApprovalsSurface(Protocol):
    """`client.approvals`."""

    def list(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> builtins.list[Approval[Any]]: ...
    def get(self, approval_id: str) -> Approval[Any]: ...
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
    def withdraw(
        self,
        approval_id: str,
        *,
        key: str | None = None,
        reason: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> DecideResult: ...


class TasksSurface(Protocol):
    """`client.tasks`."""

    def list(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> builtins.list[Task]: ...
    def get(self, task_id: str) -> Task: ...
    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Resolved: ...


class RecordsSurface(Protocol):
    """`client.records`."""

    def activity(
        self, record_type: str, record_id: str, *, limit: int = 100, after: int | None = None
    ) -> list[Activity]: ...


class CallsSurface(Protocol):
    """`client.calls`."""

    def call(
        self, op_id: str, input: Mapping[str, Any], *, key: str | None = None, by: str | None = None
    ) -> CallResult: ...
    def ledger(self, run_id: str | None = None, *, limit: int = 200) -> list[LedgerRow]: ...


class BudgetsSurface(Protocol):
    """`client.budgets`."""

    def periods(self, *, limit: int = 50) -> list[tuple[PeriodState, Decimal]]: ...
    def set(
        self,
        scope: str,
        limit: Decimal | int | str,
        *,
        period: str | None = None,
        by: str | None = None,
    ) -> PeriodState: ...


class SecretsSurface(Protocol):
    """`client.secrets`."""

    def list(self) -> builtins.list[SecretInfo]: ...
    def set(self, name: str, value: str, *, by: str | None = None) -> SecretInfo: ...
    def delete(self, name: str, *, by: str | None = None) -> bool: ...


class TokensSurface(Protocol):
    """`client.tokens`."""

    def create(
        self,
        principal: str,
        *,
        name: str = "",
        expires_in: timedelta | None = None,
        by: str | None = None,
    ) -> tuple[TokenInfo, str]: ...
    def list(self, *, by: str | None = None) -> builtins.list[TokenInfo]: ...
    def revoke(self, token_id: str, *, by: str | None = None) -> TokenInfo: ...


class SessionsSurface(Protocol):
    """`client.sessions`."""

    def link(
        self, principal: str, *, expires_in: timedelta | None = None, by: str | None = None
    ) -> tuple[LinkInfo, str]: ...
    def set_password(self, principal: str, password: str, *, by: str | None = None) -> None: ...


class OpsSurface(Protocol):
    """`client.ops`."""

    def pause(self, *, by: str | None = None) -> list[str]: ...
    def resume(self, *, by: str | None = None) -> tuple[list[str], list[str]]: ...
    def reconcile(self, *, dry_run: bool = False, by: str | None = None) -> Report: ...
    def deadlines(self, limit: int = 20) -> list[Deadline]: ...
    def workers(self) -> list[WorkerRow]: ...
    def denials(self, *, limit: int = 100) -> list[Denial]: ...


class SchedulesSurface(Protocol):
    """`client.schedules`."""

    def list(self) -> builtins.list[ScheduleState]: ...
    def pause(self, workflow: str, *, by: str | None = None) -> ScheduleState: ...
    def resume(self, workflow: str, *, by: str | None = None) -> ScheduleState: ...


class Surface(Protocol):
    """A client, local or remote: its rooms. `by` is who acts: on a local client any principal
    the policies then check (default: the client's own); through the HTTP API only the token's
    principal, so a remote client refuses any other."""

    settings: Settings

    @property
    def app_name(self) -> str: ...
    def find_id(self, kind: IdKind, given: str) -> str: ...

    @property
    def runs(self) -> RunsSurface: ...
    @property
    def changes(self) -> ChangesSurface: ...
    @property
    def approvals(self) -> ApprovalsSurface: ...
    @property
    def tasks(self) -> TasksSurface: ...
    @property
    def records(self) -> RecordsSurface: ...
    @property
    def calls(self) -> CallsSurface: ...
    @property
    def budgets(self) -> BudgetsSurface: ...
    @property
    def secrets(self) -> SecretsSurface: ...
    @property
    def tokens(self) -> TokensSurface: ...
    @property
    def sessions(self) -> SessionsSurface: ...
    @property
    def ops(self) -> OpsSurface: ...
    @property
    def schedules(self) -> SchedulesSurface: ...
