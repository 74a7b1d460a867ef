"""`client.runs`: starting runs, reading them and their steps, and ending or retrying them from
outside; `RunHandle`, the verbs for one run.

    handle = client.runs.start("ar.chase-invoice", {"invoice_id": "inv_1001"})
    print(handle.wait(timeout=60).status)

A run is served by whichever worker serves its queue; `RunHandle.wait` watches its row.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from remit.core import limits
from remit.core.acting import Acting, no_nul, not_in_a_workflow
from remit.core.errors import AppError, RemitError

if TYPE_CHECKING:
    import sqlalchemy as sa
    from dbos import DBOSClient
    from pydantic import BaseModel

    from remit.app import App
    from remit.core.runs import Run, RunStore
    from remit.declare.workflows import Workflow
    from remit.ops.messages import Child, Messages, Sent, Waiting
    from remit.ops.retries import Retried, Retries
    from remit.policy.guard import Guard


class RunServices(Protocol):
    """The client's services this room uses."""

    @property
    def runs(self) -> RunStore: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def dbos(self) -> DBOSClient: ...
    @property
    def retries(self) -> Retries: ...
    @property
    def messages(self) -> Messages: ...


class RunsClient(Acting, Protocol):
    """The client as the runs room sees it."""

    @property
    def app(self) -> App: ...
    @property
    def services(self) -> RunServices: ...


@dataclass(frozen=True)
class Step:
    """One checkpointed step of a run's attempt: its name, when it ran (epoch milliseconds),
    its output or error, and whether the attempt's fork copied it from the attempt before (it
    did not run again)."""

    attempt: int
    function_id: int
    name: str
    started_ms: int | None
    finished_ms: int | None
    output: Any
    error: str | None
    copied: bool = False

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self, width: int) -> tuple[str | None, str | None]:
        """What the step came to as a person reads it, cut to `width` characters: its output
        (an approval step's gate as `apr_… approved by user:ann via http`), or its error's
        message."""
        output, error = self.output, self.error
        if error is not None:
            return None, _cut(error, width)
        if isinstance(output, dict):
            waited = _wait_summary(self.name, output, width)
            if waited is not None:
                return waited
        if isinstance(output, dict) and isinstance(output.get("error"), dict):
            return None, _cut(output["error"].get("message", output["error"]), width)
        if isinstance(output, dict) and "error" in output:
            return None, _cut(output["error"], width)
        if self.name.startswith("approval:") and isinstance(output, dict):
            text = f"{output.get('id')} {output.get('status')}"
            if output.get("decided_by"):
                text += f" by {output['decided_by']} via {output.get('decided_via')}"
            if output.get("edited_draft") is not None:
                text += " (edited)"
            return text, None
        if isinstance(output, dict) and "ok" in output:
            return _cut(output["ok"], width), None
        return (None if output is None else _cut(output, width)), None


def keyed_run_id(app: str, principal: str, key: str) -> str:
    """The id of the run that `principal` starts in `app` under the start key `key`: the same
    in every process, so a second start under the key finds the first one's run."""
    from remit.core.keys import key_problem

    problem = key_problem(key, what="start key", longest=200, example="refund-sub_4Q7x2")
    if problem is not None:
        raise AppError(problem)
    digest = hashlib.sha256(f"{app}\n{principal}\n{key}".encode()).hexdigest()[:16]
    return f"run_{digest}"


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run as DBOS holds it: its workflow id, its status there (None: never
    given to DBOS), the version of the code that ran it and when it was made."""

    attempt: int
    workflow_id: str
    status: str | None
    version: str | None
    created_at: datetime | None


def _cut(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _wait_summary(
    name: str, output: dict[str, Any], width: int
) -> tuple[str | None, str | None] | None:
    """What a step of `ctx.wait_for`, `ctx.start`, `ctx.wait` or `ctx.publish` came to, as
    `Step.summary` says it: `message 3 from user:ann: {...}`, `pending until ...`,
    `run_1f… (key line-0)`, `2 children ended: 2 done`; None for any other step."""
    if name.startswith("wait_for:"):
        status = output.get("status")
        if status == "pending":
            deadline = output.get("deadline")
            return "pending" + (f" until {_utc(deadline)}" if deadline else ""), None
        if status == "timed_out":
            return "timed out: no message came", None
        said = f"message {output.get('seq')} from {output.get('sent_by')}"
        if status == "refused":
            return None, _cut(f"{said} refused: {output.get('error')}", width)
        return _cut(f"{said}: {_cut(output.get('payload'), width)}", width), None
    if name.startswith("start:") and isinstance(output.get("ok"), dict):
        child = output["ok"]
        return _cut(f"{child.get('run_id')} (key {child.get('key')})", width), None
    if name == "wait:children":
        if output.get("status") == "pending":
            left = [str(each) for each in output.get("waiting_for") or []]
            return _cut(f"pending: {len(left)} not ended ({', '.join(left)})", width), None
        ended = [each for each in output.get("children") or [] if isinstance(each, dict)]
        counts: dict[str, int] = {}
        for child in ended:
            counts[str(child.get("status"))] = counts.get(str(child.get("status")), 0) + 1
        statuses = ", ".join(f"{count} {status}" for status, count in counts.items())
        noun = "child" if len(ended) == 1 else "children"
        return _cut(f"{len(ended)} {noun} ended: {statuses}", width), None
    if name.startswith("publish:") and isinstance(output.get("key"), str):
        return _cut(f"published {output['key']}", width), None
    return None


def _utc(text: Any) -> str:
    """An ISO time from a step's output as a person reads it: `2026-12-06 09:00:00 UTC`."""
    try:
        at = datetime.fromisoformat(str(text))
    except ValueError:
        return str(text)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class RunHandle:
    """A run started (or looked up) through a client: its id, and the verbs for that one run
    (wait for it, read its output, cancel it, retry it)."""

    def __init__(self, runs: RunsRoom, run_id: str, workflow: Workflow) -> None:
        self._runs = runs
        self.run_id = run_id
        self.workflow = workflow

    def get(self) -> Run:
        """The run's row as it stands now."""
        return self._runs.get(self.run_id)

    def wait(self, timeout: float = 60.0, *, until: Iterable[str] = ()) -> Run:
        """Wait until the run finishes (or reaches a status in `until`, e.g. `waiting`) and
        return its row. Raises `TimeoutError` naming its status after `timeout` seconds."""
        stops = set(until)
        deadline = time.monotonic() + timeout
        while True:
            run = self.get()
            if run.finished or run.status in stops:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {self.run_id} is still {run.status} after {timeout:g}s: is a worker "
                    f"serving queue `{self.workflow.queue}`? (`remit worker`)"
                )
            time.sleep(0.05)

    def output(self, timeout: float = 60.0) -> Any:
        """Wait for the run to finish and return its output, parsed as the workflow's return
        annotation says (a pydantic model, say) when it has one. A run that did not finish
        `done` raises `RemitError` with its status and error."""
        run = self.wait(timeout)
        if run.status != "done":
            raise RemitError(f"run {self.run_id} is {run.status}: {run.error or 'no output'}")
        return self.workflow.parse_output(run.output)

    def cancel(self, *, by: str | None = None) -> Run:
        """Cancel the run, as `client.runs.cancel` does: as the policies allow, and a finished
        run is left as it is."""
        return self._runs.cancel(self.run_id, by=by)

    def retry(
        self, *, from_step: int | None = None, key: str | None = None, by: str | None = None
    ) -> Retried:
        """Retry the run, failed or cancelled, on the current code, as `client.runs.retry`
        does; `wait` then waits for the retried run."""
        return self._runs.retry(self.run_id, from_step=from_step, key=key, by=by)


class RunsRoom:
    """`client.runs`: an app's runs."""

    def __init__(self, client: RunsClient) -> None:
        self._client = client

    def start(
        self,
        workflow: str | Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        record: tuple[str, str] | None = None,
        key: str | None = None,
    ) -> RunHandle:
        """Start a run of `workflow` (a name or the workflow itself) with `input` (its model or
        a dict), under the policies; a worker serving its queue runs it. `record` names the
        business record the run concerns, e.g. `("invoice", "inv_1003")` (default: the one its
        workflow derives from the input, if it does): see `client.records.activity`.

        With a `key` (1 to 200 printable characters, no spaces), the same start again by the
        same principal starts nothing and returns the run the first one started: a form sent
        twice, or a request retried after its answer was lost, makes one run. The key used
        again for another workflow or input is refused (`KeyReused`)."""
        run = self.start_row(workflow, input, by=by, record=record, key=key)
        return RunHandle(self, run.run_id, self._client.app.workflow(run.workflow))

    def start_row(
        self,
        workflow: str | Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        record: tuple[str, str] | None = None,
        key: str | None = None,
    ) -> Run:
        """`start`, returning the run's row as it was written (or, started before under `key`,
        as it is now)."""
        not_in_a_workflow("runs.start")
        from remit.core.activity import check_record

        named = None if record is None else check_record(record, where="start(record=...)")
        wf = self._client.app.workflow(workflow if isinstance(workflow, str) else workflow.name)
        runs = self._client.services.runs.naming(named, app=self._client.app_name)
        who = self._client.who(by)
        run_id = None if key is None else keyed_run_id(self._client.app.name, who, key)
        if run_id is not None and (first := self._started(run_id, wf, input, key)) is not None:
            return first
        from sqlalchemy.exc import IntegrityError

        try:
            started = self._client.services.guard.start(
                runs, self._client.services.dbos, wf, input, by=who, run_id=run_id
            )
        except IntegrityError:
            if run_id is None:
                raise
            # The same start committed first, from another request: answer with its run.
            first = self._started(run_id, wf, input, key)
            if first is None:
                raise
            return first
        self._client.written()
        return started

    def _started(
        self, run_id: str, wf: Workflow, input: Mapping[str, Any] | BaseModel, key: str | None
    ) -> Run | None:
        """The run a start under `key` made before, if one did: the same workflow and input,
        else `KeyReused`."""
        from remit.core.errors import KeyReused
        from remit.core.runs import parse_input

        first = self._client.services.runs.find(run_id)
        if first is None:
            return None
        if first.workflow != wf.name or first.input != parse_input(wf, input):
            raise KeyReused("start key", str(key), f"start run {first.run_id} of {first.workflow}")
        return first

    def get(self, run_id: str) -> Run:
        """A run's row; `RunNotFound` if there is none."""
        return self._client.services.runs.get(run_id)

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run, to wait for it."""
        run = self.get(run_id)
        return RunHandle(self, run_id, self._client.app.workflow(run.workflow))

    def list(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 50,
        app: str | None = None,
        started_by: str | None = None,
        record: tuple[str, str] | None = None,
        since: datetime | None = None,
        id_prefix: str | None = None,
        parent: str | None = None,
        before: tuple[datetime, str] | None = None,
        only: sa.ColumnElement[bool] | None = None,
    ) -> builtins.list[Run]:
        """Runs, newest first: of a status, a workflow, an app of the repo (`""`: the root's),
        a starter, a record, started at `since` or later, whose ids begin with `id_prefix`,
        started as children of the run `parent`;
        `before` the (created at, run id) of the previous page's last; `only` a further
        condition (what a principal may read, `remit.reads`)."""
        limits.check_limit(limit, where="runs.list")
        no_nul(
            "runs.list",
            status=status,
            workflow=workflow,
            app=app,
            started_by=started_by,
            id_prefix=id_prefix,
            parent=parent,
        )
        return self._client.services.runs.list(
            status=status,
            workflow=workflow,
            limit=limit,
            app=app,
            started_by=started_by,
            record=record,
            since=since,
            id_prefix=id_prefix,
            parent=parent,
            before=before,
            only=only,
        )

    def steps(self, run_id: str) -> builtins.list[Step]:
        """Each attempt's steps as DBOS checkpointed them, attempt by attempt."""
        from remit.core.runs import attempt_workflow_id

        run = self.get(run_id)
        found: list[Step] = []
        earlier: dict[int, Step] = {}
        for attempt in range(1, run.attempt + 1):
            for step in self._client.services.dbos.list_workflow_steps(
                attempt_workflow_id(run_id, attempt)
            ):
                error, started = step["error"], step["started_at_epoch_ms"]
                before = earlier.get(step["function_id"])
                read = Step(
                    attempt=attempt,
                    function_id=step["function_id"],
                    name=step["function_name"],
                    started_ms=started,
                    finished_ms=step["completed_at_epoch_ms"],
                    output=step["output"],
                    error=None if error is None else str(error),
                    # A fork copies a step as it was: the same start and the same output.
                    copied=before is not None
                    and (before.started_ms, before.output) == (started, step["output"]),
                )
                earlier[read.function_id] = read
                found.append(read)
        return found

    def attempts(self, run_id: str) -> builtins.list[Attempt]:
        """Each attempt of a run, first to last, as DBOS holds it: its workflow id, its status
        there and the version of the code that ran it."""
        from remit.core.runs import attempt_workflow_id

        run = self.get(run_id)
        ids = [attempt_workflow_id(run_id, n) for n in range(1, run.attempt + 1)]
        held = {
            w.workflow_id: w
            for w in self._client.services.dbos.list_workflows(workflow_ids=ids, load_input=False)
        }
        found: list[Attempt] = []
        for number, workflow_id in enumerate(ids, start=1):
            status = held.get(workflow_id)
            created = None if status is None or status.created_at is None else status.created_at
            found.append(
                Attempt(
                    attempt=number,
                    workflow_id=workflow_id,
                    status=None if status is None else status.status,
                    version=None if status is None else status.app_version,
                    created_at=None
                    if created is None
                    else datetime.fromtimestamp(created / 1000, UTC),
                )
            )
        return found

    def send(
        self,
        run_id: str,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> Sent:
        """Send `payload` (JSON, or a pydantic model) to the run on `topic`, as the policies
        allow (`send` on its workflow). A run waiting on that topic (`ctx.wait_for`) carries
        on with it; a run not waiting yet keeps it until it does. With a `key`, the same send
        again answers with the first one's message (`replayed`); the key used again for
        another message is refused (`KeyReused`). `SendRefused` once the run has finished."""
        not_in_a_workflow("runs.send")
        no_nul("runs.send", run_id=run_id, topic=topic, key=key)
        sent = self._client.services.messages.send(
            self._client.services.guard,
            run_id,
            topic,
            payload,
            by=self._client.person(by),
            key=key,
        )
        self._client.written()
        return sent

    def state(self, run_id: str) -> dict[str, Any]:
        """The latest value of each key the run published (`ctx.publish`), by key."""
        self.get(run_id)
        return self._client.services.messages.state(run_id)

    def messages(self, run_id: str) -> builtins.list[Any]:
        """The messages sent to the run, in order: `queued`, `taken` or `refused`."""
        self.get(run_id)
        return self._client.services.messages.messages(run_id)

    def waiting(self, run_id: str) -> builtins.list[Waiting]:
        """What the run waits for other than people and time: a message, or its children."""
        self.get(run_id)
        return self._client.services.messages.waiting(run_id)

    def children(self, run_id: str) -> builtins.list[Child]:
        """The child runs `run_id` started (`ctx.start`), oldest first."""
        self.get(run_id)
        return self._client.services.messages.children(run_id)

    def parent(self, run_id: str) -> Child | None:
        """How the run was started as a child (its parent, key, step), or None."""
        self.get(run_id)
        return self._client.services.messages.parent(run_id)

    def record(self, run_id: str) -> tuple[str, str] | None:
        """The business record a run concerns (type, id), named when it started, or None."""
        from remit.core.activity import record_of_run

        with self._client.db.engine.connect() as conn:
            ref = record_of_run(conn, run_id)
        return None if ref is None else (ref.record_type, ref.record_id)

    def cancel(self, run_id: str, *, by: str | None = None) -> Run:
        """Cancel a run that has not finished, as the policies allow (`cancel` on its
        workflow); a finished one is left as it is."""
        not_in_a_workflow("runs.cancel")
        from remit.people.ending import cancel_run

        who = self._client.person(by)
        run = self.get(run_id)
        self._client.services.guard.require(
            who, "cancel", run.workflow, {"input": run.input, "status": run.status}
        )
        return cancel_run(self._client.services.runs, self._client.services.dbos, run_id, by=who)

    def retry(
        self,
        run_id: str,
        *,
        from_step: int | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Retried:
        """Retry a failed or cancelled run on the current code (see `Retries.retry`)."""
        not_in_a_workflow("runs.retry")
        retried = self._client.services.retries.retry(
            run_id, by=self._client.who(by), from_step=from_step, key=key
        )
        self._client.written()
        return retried
