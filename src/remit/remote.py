"""`RemoteClient`: an app's verbs through `remit serve`, as the principal of an API token.

    from remit.remote import RemoteClient

    with RemoteClient("https://desk.example.com", token) as remit:
        run = remit.runs.start_row("ar.chase-invoice", {"invoice_id": "inv_1001"})

It answers the verbs of `remit.surface.Surface` as a `remit.Client` does on the database, with
the same values, read from the HTTP API's answers; what an answer does not carry (an approval's
step number, a ledger row's input hash) is left empty. Who acts is the token's principal: a verb
given another `by` is refused rather than sent, since the server would act as the token anyway.
The command line uses it when `REMIT_URL` (or `--url`) is set. An error answer is raised as the
error the client would raise where it has one (`Unauthenticated`, `PolicyDenied`,
`RunNotFound`, ...; else `RemitError`), with the server's message.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from remit.core.errors import (
    ApprovalNotFound,
    RemitError,
    RunNotFound,
    TaskNotFound,
    TooLarge,
    Unauthenticated,
)
from remit.core.settings import Settings
from remit.remote_chats import RemoteChats, chat_error_of

if TYPE_CHECKING:
    from pydantic import BaseModel

    from remit.budgets.model import PeriodState
    from remit.changes.store import Change, Deploy
    from remit.client import IdKind
    from remit.connectors.credentials import SecretInfo
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.execution.direct import CallResult
    from remit.ops.concluding import Report
    from remit.ops.deadlines import Deadline
    from remit.ops.messages import Child, Message, Sent, Waiting
    from remit.ops.registry import WorkerRow
    from remit.ops.retries import Retried
    from remit.ops.runs import Step
    from remit.ops.schedules import ScheduleState
    from remit.people.activity import Activity
    from remit.people.approvals import Approval, Decided, DecideResult
    from remit.people.tasks import Resolved, Task
    from remit.policy.guard import Denial
    from remit.policy.signin import LinkInfo
    from remit.policy.tokens import TokenInfo

# Where an unknown id is answered 404, the error the client raises for it.
_NOT_FOUND = {"runs": RunNotFound, "approvals": ApprovalNotFound, "tasks": TaskNotFound}
_PATHS = {"run": "runs", "approval": "approvals", "task": "tasks"}


class RemoteClient:
    """A client on an app through its HTTP API (see the module's docstring). Close it, or use it
    as a context manager, when done."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        settings: Settings | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise RemitError(f"REMIT_URL {url!r} is not an http:// or https:// address")
        self.url = url.rstrip("/")
        self.settings = settings or Settings.from_env(".")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        self._app_name: str | None = None
        self.runs = RemoteRuns(self)
        self.changes = RemoteChanges(self)
        self.approvals = RemoteApprovals(self)
        self.tasks = RemoteTasks(self)
        self.records = RemoteRecords(self)
        self.calls = RemoteCalls(self)
        self.budgets = RemoteBudgets(self)
        self.secrets = RemoteSecrets(self)
        self.tokens = RemoteTokens(self)
        self.sessions = RemoteSessions(self)
        self.ops = RemoteOps(self)
        self.schedules = RemoteSchedules(self)
        self.chats = RemoteChats(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def app_name(self) -> str:
        """The app's name, as the API's spec titles it (`remit: <app>`)."""
        if self._app_name is None:
            title = str(self._get("/openapi.json")["info"]["title"])
            self._app_name = title.removeprefix("remit: ")
        return self._app_name

    def find_id(self, kind: IdKind, given: str) -> str:
        """The whole id `given` names; as given when there is none (the verb then refuses)."""
        try:
            found = self._get(f"/{_PATHS[kind]}/{_part(given)}")
        except (RunNotFound, ApprovalNotFound, TaskNotFound):
            return given
        return str(found["run_id" if kind == "run" else "id"])

    def fake_state(self, vendor: str) -> dict[str, Any]:
        """What the vendor's fake holds, as a demo instance (`remit demo`) serves it."""
        state: dict[str, Any] = self._get(f"/fakes/{_part(vendor)}")
        return state

    def _as_token(self, by: str | None) -> None:
        if by is not None:
            raise RemitError(
                f"{self.url} acts as the principal of its API token: --as {by} cannot be sent "
                "there (make a token for that principal, or act on the database directly)"
            )

    def _get(self, path: str, *, params: Mapping[str, Any] | None = None) -> Any:
        return self._send("GET", path, params=params)

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> Any:
        headers = {} if key is None else {"Idempotency-Key": key}
        try:
            answer = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as error:
            raise RemitError(f"{self.url} did not answer ({error}): is `remit serve` running?")
        if answer.is_success:
            return answer.json()
        raise _error(answer, path)


class RemoteRuns:
    """`runs` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def start_row(
        self,
        workflow: str,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        record: tuple[str, str] | None = None,
        key: str | None = None,
    ) -> Run:
        self._remote._as_token(by)
        payload = input if isinstance(input, Mapping) else input.model_dump(mode="json")
        body: dict[str, Any] = {"workflow": workflow, "input": dict(payload)}
        if record is not None:
            body["record"] = {"type": record[0], "id": record[1]}
        return _run(self._remote._send("POST", "/runs", json=body, key=key))

    def get(self, run_id: str) -> Run:
        return _run(self._remote._get(f"/runs/{_part(run_id)}"))

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
    ) -> builtins.list[Run]:
        params = _params(
            status=status,
            workflow=workflow,
            limit=limit,
            started_by=started_by,
            record=None if record is None else ":".join(record),
            since=None if since is None else since.isoformat(),
            parent=parent,
        )
        return [_run(each) for each in self._remote._get("/runs", params=params)]

    def steps(self, run_id: str) -> builtins.list[Step]:
        from remit.ops.runs import Step

        return [
            Step(
                attempt=each["attempt"],
                function_id=each["function_id"],
                name=each["name"],
                started_ms=_epoch_ms(each["started_at"]),
                finished_ms=_epoch_ms(each["finished_at"]),
                output=each["output"],
                error=each["error"],
                copied=each["copied"],
            )
            for each in self._remote._get(f"/runs/{_part(run_id)}/steps")
        ]

    def send(
        self,
        run_id: str,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> Sent:
        from pydantic_core import to_jsonable_python

        from remit.ops.messages import Sent

        self._remote._as_token(by)
        body = {"topic": topic, "payload": to_jsonable_python(payload)}
        path = f"/runs/{_part(run_id)}/messages"
        return Sent(**self._remote._send("POST", path, json=body, key=key))

    def state(self, run_id: str) -> dict[str, Any]:
        state: dict[str, Any] = self._remote._get(f"/runs/{_part(run_id)}/state")
        return state

    def messages(self, run_id: str) -> builtins.list[Message]:
        from remit.ops.messages import Message

        found = self._remote._get(f"/runs/{_part(run_id)}/messages")
        return [Message(**_dated(each, ("sent_at", "taken_at"))) for each in found]

    def waiting(self, run_id: str) -> builtins.list[Waiting]:
        from remit.ops.messages import Waiting

        found = self._remote._get(f"/runs/{_part(run_id)}")["waiting"]
        return [Waiting(**_dated(each, ("deadline", "since"))) for each in found]

    def children(self, run_id: str) -> builtins.list[Child]:
        from remit.ops.messages import Child

        found = self._remote._get(f"/runs/{_part(run_id)}/children")
        return [Child(**_dated(each, ("created_at",))) for each in found]

    def parent(self, run_id: str) -> Child | None:
        """How the run was started as a child, from the run and its `parent`."""
        from remit.ops.messages import Child

        run = self._remote._get(f"/runs/{_part(run_id)}")
        link = run["parent"]
        if link is None:
            return None
        return Child(
            run_id=run["run_id"],
            parent_run_id=link["run_id"],
            workflow=run["workflow"],
            key=link["key"],
            step_id=link["step_id"],
            detached=link["detached"],
            status=run["status"],
            created_at=_when(run["created_at"]),
        )

    def cancel(self, run_id: str, *, by: str | None = None) -> Run:
        self._remote._as_token(by)
        return _run(self._remote._send("POST", f"/runs/{_part(run_id)}/cancel"))

    def retry(
        self,
        run_id: str,
        *,
        from_step: int | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Retried:
        from remit.ops.retries import Retried

        self._remote._as_token(by)
        answer = self._remote._send(
            "POST", f"/runs/{_part(run_id)}/retry", json={"from_step": from_step}, key=key
        )
        return Retried(**answer)


class RemoteChanges:
    """`changes` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def open(
        self,
        branch: str,
        *,
        title: str = "",
        base: str = "main",
        by: str | None = None,
        key: str | None = None,
    ) -> Change:
        self._remote._as_token(by)
        body = {"branch": branch, "title": title, "base": base}
        return _change(self._remote._send("POST", "/changes", json=body, key=key))

    def list(self, *, branch: str | None = None, limit: int = 50) -> builtins.list[Change]:
        params = _params(branch=branch, limit=limit)
        return [_change(each) for each in self._remote._get("/changes", params=params)]

    def get(self, change_id: str) -> Change:
        return _change(self._remote._get(f"/changes/{_part(change_id)}"))

    def deploys(
        self, *, host: str | None = None, change_id: str | None = None, limit: int = 50
    ) -> builtins.list[Deploy]:
        from remit.changes.store import Deploy

        params = _params(host=host, change_id=change_id, limit=limit)
        return [
            Deploy(**_dated(each, ("at",))) for each in self._remote._get("/deploys", params=params)
        ]


class RemoteApprovals:
    """`approvals` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def list(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> builtins.list[Approval[Any]]:
        params = _params(status=status, run=run_id, limit=limit)
        return [_approval(each) for each in self._remote._get("/approvals", params=params)]

    def get(self, approval_id: str) -> Approval[Any]:
        return _approval(self._remote._get(f"/approvals/{_part(approval_id)}"))

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
        from remit.people.approvals import DecideResult

        self._remote._as_token(by)
        body = {
            "ids": [ids] if isinstance(ids, str) else list(ids),
            "decision": decision,
            "edits": None if edits is None else {k: dict(v) for k, v in edits.items()},
            "reason": reason,
        }
        answer = self._remote._send("POST", "/approvals/decisions", json=body, key=key)
        decided = [_decided(each) for each in answer["approvals"]]
        return DecideResult(
            replayed=answer["replayed"], batch_id=answer["batch_id"], decided=decided
        )

    def withdraw(
        self,
        approval_id: str,
        *,
        key: str | None = None,
        reason: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> DecideResult:
        from remit.people.approvals import DecideResult

        self._remote._as_token(by)
        answer = self._remote._send(
            "POST",
            f"/approvals/{_part(approval_id)}/withdraw",
            json={"reason": reason},
            key=key,
        )
        return DecideResult(
            replayed=answer["replayed"], batch_id=None, decided=[_decided(answer["approval"])]
        )


class RemoteTasks:
    """`tasks` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def list(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> builtins.list[Task]:
        params = _params(status=status, run=run_id, limit=limit)
        return [_task(each) for each in self._remote._get("/tasks", params=params)]

    def get(self, task_id: str) -> Task:
        return _task(self._remote._get(f"/tasks/{_part(task_id)}"))

    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Resolved:
        from remit.people.tasks import Resolved

        self._remote._as_token(by)
        body = {"done": done, "output": None if output is None else dict(output)}
        answer = self._remote._send(
            "POST", f"/tasks/{_part(task_id)}/resolution", json=body, key=key
        )
        task = answer["task"]
        return Resolved(
            task_id=task["id"],
            run_id=task["run_id"],
            status=task["status"],
            then=answer["then"],
            resumed_workflow_id=answer["resumed_workflow_id"],
            replayed=answer["replayed"],
        )


class RemoteRecords:
    """`records` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def activity(
        self, record_type: str, record_id: str, *, limit: int = 100, after: int | None = None
    ) -> list[Activity]:
        from remit.people.activity import Activity

        path = f"/records/{_part(record_type)}/{_part(record_id)}/activity"
        return [
            Activity(app=self._remote.app_name, **{**each, "at": _time(each["at"])})
            for each in self._remote._get(path, params=_params(limit=limit, after=after))
        ]


class RemoteCalls:
    """`calls` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def call(
        self, op_id: str, input: Mapping[str, Any], *, key: str | None = None, by: str | None = None
    ) -> CallResult:
        from remit.execution.direct import CallResult

        self._remote._as_token(by)
        answer = self._remote._send(
            "POST", "/calls", json={"op": op_id, "input": dict(input)}, key=key
        )
        return CallResult(**answer)

    def ledger(self, run_id: str | None = None, *, limit: int = 200) -> list[LedgerRow]:
        from remit.core.ledger import EarlierTry, LedgerRow

        rows = self._remote._get("/ledger", params=_params(run=run_id, limit=limit))
        return [
            LedgerRow(
                id=each["id"],
                run_id=each["run_id"],
                attempt=each["attempt"],
                step_id=each["step_id"],
                op_id=each["op_id"],
                effect=each["effect"],
                idempotent=each["idempotent"],
                idempotency_key=each["idempotency_key"],
                input_hash="",
                status=each["status"],
                tries=each["tries"],
                actor=each["actor"],
                started_at=_when(each["started_at"]),
                finished_at=_time(each["finished_at"]),
                output=each["output"],
                error=each["error"],
                error_info=None,
                cost=None if each["cost_usd"] is None else Decimal(each["cost_usd"]),
                earlier=tuple(
                    EarlierTry(**{**tried, "at": _when(tried["at"])})
                    for tried in each.get("earlier", [])
                ),
            )
            for each in rows
        ]


class RemoteBudgets:
    """`budgets` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def periods(self, *, limit: int = 50) -> list[tuple[PeriodState, Decimal]]:
        return [
            (_period(each), Decimal(each["drift_usd"]))
            for each in self._remote._get("/budgets", params=_params(limit=limit))
        ]

    def set(
        self,
        scope: str,
        limit: Decimal | int | str,
        *,
        period: str | None = None,
        by: str | None = None,
    ) -> PeriodState:
        self._remote._as_token(by)
        body = {"limit": str(limit), "period": period}
        return _period(self._remote._send("PUT", f"/budgets/{_part(scope)}/limit", json=body))


class RemoteSecrets:
    """`secrets` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def list(self) -> builtins.list[SecretInfo]:
        from remit.connectors.credentials import SecretInfo

        return [
            SecretInfo(each["name"], _when(each["set_at"]), each["set_by"])
            for each in self._remote._get("/secrets")
        ]

    def set(self, name: str, value: str, *, by: str | None = None) -> SecretInfo:
        from remit.connectors.credentials import SecretInfo

        self._remote._as_token(by)
        answer = self._remote._send("PUT", f"/secrets/{_part(name)}", json={"value": value})
        return SecretInfo(answer["name"], _when(answer["set_at"]), answer["set_by"])

    def delete(self, name: str, *, by: str | None = None) -> bool:
        self._remote._as_token(by)
        try:
            self._remote._send("DELETE", f"/secrets/{_part(name)}")
        except _Missing:
            return False
        return True


class RemoteTokens:
    """`tokens` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def create(
        self,
        principal: str,
        *,
        name: str = "",
        expires_in: timedelta | None = None,
        by: str | None = None,
    ) -> tuple[TokenInfo, str]:
        self._remote._as_token(by)
        expires = None
        if expires_in is not None:
            expires = f"{max(1, round(expires_in.total_seconds() / 60))}m"
        body = {"for": principal, "name": name, "expires": expires}
        answer = self._remote._send("POST", "/tokens", json=body)
        return _token(answer["info"]), str(answer["token"])

    def list(self, *, by: str | None = None) -> builtins.list[TokenInfo]:
        self._remote._as_token(by)
        return [_token(each) for each in self._remote._get("/tokens")]

    def revoke(self, token_id: str, *, by: str | None = None) -> TokenInfo:
        self._remote._as_token(by)
        return _token(self._remote._send("DELETE", f"/tokens/{_part(token_id)}"))


class RemoteSessions:
    """`sessions` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def link(
        self, principal: str, *, expires_in: timedelta | None = None, by: str | None = None
    ) -> tuple[LinkInfo, str]:
        from remit.policy.signin import LinkInfo

        self._remote._as_token(by)
        expires = None
        if expires_in is not None:
            expires = f"{max(1, round(expires_in.total_seconds() / 60))}m"
        answer = self._remote._send(
            "POST", "/login-links", json={"for": principal, "expires": expires}
        )
        made = LinkInfo(
            id=str(answer["id"]),
            principal=str(answer["principal"]),
            created_at=datetime.fromisoformat(answer["created_at"]),
            created_by=str(answer["created_by"]),
            expires_at=datetime.fromisoformat(answer["expires_at"]),
        )
        return made, str(answer["code"])

    def set_password(self, principal: str, password: str, *, by: str | None = None) -> None:
        self._remote._as_token(by)
        self._remote._send("PUT", f"/passwords/{_part(principal)}", json={"password": password})


class RemoteOps:
    """`ops` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def pause(self, *, by: str | None = None) -> list[str]:
        self._remote._as_token(by)
        return list(self._remote._send("POST", "/pause")["queues"])

    def resume(self, *, by: str | None = None) -> tuple[list[str], list[str]]:
        self._remote._as_token(by)
        answer = self._remote._send("POST", "/resume")
        return list(answer["queues"]), list(answer["carried_on"])

    def reconcile(self, *, dry_run: bool = False, by: str | None = None) -> Report:
        from remit.budgets.model import Drift
        from remit.ops.concluding import Action, Report

        self._remote._as_token(by)
        answer = self._remote._send("POST", "/reconcile", json={"dry_run": dry_run})
        return Report(
            dry_run=answer["dry_run"],
            actions=[Action(**each) for each in answer["actions"]],
            errors=list(answer["errors"]),
            drift=[
                Drift(
                    scope=each["scope"],
                    period=each["period"],
                    spent_usd=Decimal(each["spent_usd"]),
                    ledger_usd=Decimal(each["ledger_usd"]),
                )
                for each in answer["drift"]
            ],
        )

    def deadlines(self, limit: int = 20) -> list[Deadline]:
        from remit.ops.deadlines import Deadline

        return [
            Deadline(**{**each, "at": _when(each["at"])})
            for each in self._remote._get("/deadlines", params=_params(limit=limit))
        ]

    def workers(self) -> list[WorkerRow]:
        from remit.ops.registry import WorkerRow

        times = ("started_at", "heartbeat_at", "stopped_at", "taken_over_at")
        return [
            WorkerRow(app=self._remote.app_name, **_dated(each, times, leave=("state",)))
            for each in self._remote._get("/workers")
        ]

    def denials(self, *, limit: int = 100) -> list[Denial]:
        from remit.policy.guard import Denial

        return [
            Denial(**{**each, "at": _time(each["at"])})
            for each in self._remote._get("/denials", params=_params(limit=limit))
        ]


class RemoteSchedules:
    """`schedules` through the HTTP API."""

    def __init__(self, remote: RemoteClient) -> None:
        self._remote = remote

    def list(self) -> builtins.list[ScheduleState]:
        return [_schedule(each) for each in self._remote._get("/schedules")]

    def pause(self, workflow: str, *, by: str | None = None) -> ScheduleState:
        self._remote._as_token(by)
        return _schedule(self._remote._send("POST", f"/schedules/{_part(workflow)}/pause"))

    def resume(self, workflow: str, *, by: str | None = None) -> ScheduleState:
        self._remote._as_token(by)
        return _schedule(self._remote._send("POST", f"/schedules/{_part(workflow)}/resume"))


class _Missing(RemitError):
    """An answer 404 about something that is not a run, an approval or a task."""


def _error(answer: httpx.Response, path: str) -> RemitError:
    """The error a local client would raise, from an error answer."""
    from remit.policy.cedar import PolicyDenied

    try:
        message = str(answer.json()["error"])
    except (ValueError, KeyError, TypeError):
        message = f"the server answered {answer.status_code}: {answer.text[:200]}"
    status = answer.status_code
    if status == 401:
        return Unauthenticated(message)
    if status == 403:
        return PolicyDenied(message, principal="", action="", resource="")
    if path.startswith("/chats") and (found := chat_error_of(answer, path)) is not None:
        return found
    if status == 404 and path.startswith("/changes/"):
        from remit.ops.changes import ChangeNotFound

        return ChangeNotFound(message)
    if status == 404:
        return _NOT_FOUND.get(path.split("/")[1], _Missing)(message)
    if status == 413:
        # The answer's message names the setting; the sizes are in the words alone.
        named = re.search(r"\b(REMIT_MAX_[A-Z_]+)\b", message)
        setting = named.group(1) if named else "REMIT_MAX_BODY_BYTES"
        return TooLarge(message, what="the request", size=0, limit=0, setting=setting)
    return RemitError(message)


def _params(**given: Any) -> dict[str, Any]:
    return {name: value for name, value in given.items() if value is not None}


def _part(value: str) -> str:
    """`value` as one segment of a path."""
    from urllib.parse import quote

    return quote(value, safe="")


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


def _when(value: str) -> datetime:
    found = _time(value)
    assert found is not None
    return found


def _dated(
    data: Mapping[str, Any], times: tuple[str, ...], *, leave: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`data` with its fields named in `times` read as datetimes, less those in `leave`."""
    return {
        name: _time(value) if name in times else value
        for name, value in data.items()
        if name not in leave
    }


def _epoch_ms(value: str | None) -> int | None:
    at = _time(value)
    return None if at is None else int(at.astimezone(UTC).timestamp() * 1000)


def _run(data: Mapping[str, Any]) -> Run:
    from remit.core.runs import Run

    times = ("created_at", "updated_at", "finished_at")
    # `GET /runs/{id}` adds the run's `parent` and `waiting` (`runs.parent`, `runs.waiting`).
    return Run(**_dated(data, times, leave=("parent", "waiting")))


def _change(data: Mapping[str, Any]) -> Change:
    from remit.changes.store import Change

    return Change(**_dated(data, ("created_at", "updated_at")))


def _decided(data: Mapping[str, Any]) -> Decided:
    """What a decision or a withdrawal did to one approval, from the approval it answered."""
    from remit.people.approvals import Decided

    return Decided(
        approval_id=data["id"],
        run_id=data["run_id"],
        key=data["key"],
        status=data["status"],
        resumed_workflow_id=data["resumed_workflow_id"],
    )


def _approval(data: Mapping[str, Any]) -> Approval[Any]:
    from remit.people.approvals import Approval, UndeclaredDraft

    edited = data["edited_draft"]
    return Approval(
        id=data["id"],
        run_id=data["run_id"],
        key=data["key"],
        type=data["type"],
        title=data["title"],
        draft=UndeclaredDraft(**data["draft"]),
        edited_draft=None if edited is None else UndeclaredDraft(**edited),
        status=data["status"],
        assignee=data["assignee"],
        created_at=_when(data["created_at"]),
        expires_at=_time(data["expires_at"]),
        workflow_id="",
        step_id=0,
        decided_by=data["decided_by"],
        decided_via=data["decided_via"],
        decided_at=_time(data["decided_at"]),
        decision_key=None,
        batch_id=data["batch_id"],
        reason=data["reason"],
        resumed_workflow_id=data["resumed_workflow_id"],
        draft_json=dict(data["draft"]),
        edited_draft_json=None if edited is None else dict(edited),
        editable=None if data.get("editable") is None else tuple(data["editable"]),
    )


def _task(data: Mapping[str, Any]) -> Task:
    from remit.people.tasks import Task

    return Task(
        id=data["id"],
        app="",
        run_id=data["run_id"],
        workflow_id=data["workflow_id"],
        step_id=data["step_id"],
        op_id=data["op_id"],
        idempotency_key=data["idempotency_key"],
        title=data["title"],
        status=data["status"],
        output=data["output"],
        created_at=_when(data["created_at"]),
        resolved_at=_time(data["resolved_at"]),
        resolved_by=data["resolved_by"],
        resolve_key=None,
        resumed_workflow_id=data["resumed_workflow_id"],
        input=data.get("input"),
    )


def _schedule(data: Mapping[str, Any]) -> ScheduleState:
    from remit.ops.schedules import ScheduleState

    return ScheduleState(**_dated(data, ("next_at", "last_fired_at", "paused_at")))


def _period(data: Mapping[str, Any]) -> PeriodState:
    from remit.budgets.model import PeriodState

    return PeriodState(
        scope=data["scope"],
        period=data["period"],
        limit_usd=Decimal(data["limit_usd"]),
        spent_usd=Decimal(data["spent_usd"]),
        reserved_usd=Decimal(data["reserved_usd"]),
        updated_at=_time(data["updated_at"]),
        limit_set_by=data["limit_set_by"],
    )


def _token(data: Mapping[str, Any]) -> TokenInfo:
    from remit.policy.tokens import TokenInfo

    return TokenInfo(
        id=data["id"],
        principal=data["principal"],
        name=data["name"],
        created_at=_when(data["created_at"]),
        created_by=data["created_by"],
        expires_at=_time(data["expires_at"]),
        revoked_at=_time(data["revoked_at"]),
        revoked_by=data["revoked_by"],
    )
