"""Every error remit raises, under one root.

    RemitError
    ├── AppError              the app folder cannot be loaded as written (fix the code)
    ├── InputInvalid          an input does not parse against its workflow's or op's model
    ├── TooLarge              a value is past its size limit (`REMIT_MAX_*`); nothing was written
    ├── UnknownWorkflow       no workflow of that name in the app
    ├── RunNotFound           no run with that id
    ├── SettingsError         an environment setting has a value remit cannot use
    ├── DatabaseError         the database URL is unusable or the database cannot be prepared
    ├── StepFailed            a `ctx.step` function raised (the same on first run and replay)
    ├── TaskNotFound          no task with that id
    ├── TaskRefused           `Tasks.resolve` refused, listing every reason; nothing was written
    ├── RetryRefused          `retry` refused (the run is not failed or cancelled, a bad step)
    ├── KeyReused             a key sent again with another request than its first; nothing done
    ├── SendRefused           a message to a run that has finished, or on a topic it cannot take
    ├── ChildFailed           a child run a workflow waited for failed or was cancelled
    ├── ChatNotFound          no chat with that id, or the app has no operator agent
    ├── ChatBusy              a chat's turn is going; its next message waits for it
    ├── NoDraft               a chat has no draft to confirm, discard or try (or not one that can be tried)
    ├── Unauthenticated       an API token is missing, unknown, expired or revoked
    ├── InitRefused           `remit init` would overwrite something or make an unloadable name
    └── OpError               an operation call did not succeed (raised inside a run)
        ├── OpNotDeclared     the workflow called an op it did not list in `uses`
        ├── MissingCredential the driver needs an environment variable that is not set
        ├── BudgetExceeded    refused before the call: it could take a budget past its limit
        ├── DriverError       the vendor (or the driver) refused or failed the call
        └── OpUncertain       a write's outcome is unknown, recorded before tasks existed

and, outside the root because a workflow must not swallow it:

    BaseException
    ├── RunMovedOn            the attempt was superseded or cancelled; it starts no new write
    ├── CodeChanged           the code no longer matches a step the run had passed; the run fails
    └── RunTimedOut           the run went past its workflow's `timeout=`; the run fails

Fields are keyword-only. Whether a retry can help is the `retryable` field, never parsed from a
message.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

from pydantic import ValidationError

from remit.core.text import PROBLEMS, excerpt, listed


class RemitError(Exception):
    """The root of every error remit raises."""


class AppError(RemitError):
    """The app cannot be loaded: the message names what to change."""


class InputInvalid(RemitError):
    """An input does not parse against its model: a run's (nothing was written) or an op's.

    `target` names the workflow or op; `errors` are pydantic's, one per field.
    """

    def __init__(self, message: str, *, target: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.target = target
        self.errors = errors

    @classmethod
    def of(cls, error: ValidationError, *, what: str, target: str, after: str) -> InputInvalid:
        """`what` does not parse: one problem per field, then `after` (what to do next)."""
        found = error.errors(include_url=False, include_input=False)
        problems = [
            excerpt(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}", 200)
            for e in found
        ]
        return cls(
            f"{what} does not parse: {listed(problems)}. {after}",
            target=target,
            errors=short_errors(error),
        )


def short_errors(error: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as JSON, at most `PROBLEMS` of them, each quoting at most an excerpt
    of the input it refused."""
    shown: list[dict[str, Any]] = []
    for each in error.errors(include_url=False)[:PROBLEMS]:
        item = json.loads(json.dumps(each, default=str))
        if "input" in item:
            item["input"] = _short(item["input"])
        if "msg" in item:
            item["msg"] = excerpt(item["msg"], 200)
        if isinstance(item.get("ctx"), dict):
            item["ctx"] = {k: _short(v) for k, v in item["ctx"].items()}
        shown.append(item)
    return shown


def _short(value: Any) -> Any:
    """`value` as it is when its JSON is short, else an excerpt of it."""
    shown = excerpt(value)
    return value if not shown.endswith("…") else shown


class TooLarge(RemitError):
    """A value is past its limit: a run's input, a step's output, an op call's input or
    output, a draft, a reason, a request body. Nothing was written.

    `what` names the value, `size` is how big it is and `limit` the cap, in `unit` (`bytes` of
    its compact JSON, or `characters`), and `setting` the environment variable that raises it.
    """

    def __init__(
        self,
        message: str,
        *,
        what: str,
        size: int,
        limit: int,
        setting: str,
        unit: Literal["bytes", "characters"] = "bytes",
    ) -> None:
        super().__init__(message)
        self.what = what
        self.size = size
        self.limit = limit
        self.setting = setting
        self.unit = unit


class UnknownWorkflow(RemitError):
    """A run was asked for a workflow the app does not define."""


class RunNotFound(RemitError):
    """No run has the id that was given."""


class SettingsError(RemitError):
    """An environment setting has a value remit cannot use; the message names it."""


class DatabaseError(RemitError):
    """The database URL is unusable, or the database could not be prepared."""


class RowLocked(RemitError):
    """A transaction that answers a person (a decision, a task's answer, a retry), sends a
    message to a run, or makes a reconciler's move of a run waited past `REMIT_LOCK_TIMEOUT`
    for a row another session holds locked. Nothing was written; the message names the
    session that holds the lock, where Postgres could tell. Trying again is safe."""


class OpError(RemitError):
    """An operation call did not succeed. `retryable` says whether calling again can help."""

    def __init__(self, message: str, *, op: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.op = op
        self.retryable = retryable


class OpNotDeclared(OpError):
    """A workflow called an op that its `uses` does not list."""


class MissingCredential(OpError):
    """The driver needs an environment variable (or credential) that is not set."""

    def __init__(self, message: str, *, op: str, variable: str) -> None:
        super().__init__(message, op=op, retryable=False)
        self.variable = variable

    @classmethod
    def named(cls, op: str, variable: str) -> MissingCredential:
        return cls(
            f"op `{op}` needs the credential `{variable}`: store it with `remit secrets set "
            f"{variable}`, or set the environment variable {variable} for the worker (or run "
            "with REMIT_FAKES=1 to use the fakes)",
            op=op,
            variable=variable,
        )


class BudgetExceeded(OpError):
    """A call with a cost was refused before it was made: reserving the most it can cost would
    take a budget period past its limit. Nothing was called.

    `scope` is `app` or `workflow:<name>`, `period` the period's key (`2026-11`); `limit`,
    `spent` (by settled calls), `reserved` (by calls in flight) and `requested` (this call's
    most) are Decimal USD. The same error is raised on the first run and on replay. Catch it
    to wait at an approval and raise the limit (`ctx.raise_budget`), or let the run fail.
    """

    def __init__(
        self,
        message: str,
        *,
        op: str,
        scope: str,
        period: str,
        limit: Decimal,
        spent: Decimal,
        reserved: Decimal,
        requested: Decimal,
    ) -> None:
        super().__init__(message, op=op, retryable=False)
        self.scope = scope
        self.period = period
        self.limit = limit
        self.spent = spent
        self.reserved = reserved
        self.requested = requested


class DriverError(OpError):
    """A driver's call failed. Drivers raise it; `retryable` drives remit's retry decision.

    `status` is the vendor's HTTP status where there was one, `vendor_code` its error code.
    `maybe_applied` says whether the vendor may have acted on the call before it failed: False
    for a refusal (a 4xx answer, a connection never made), True for a 5xx answer or a timeout
    after the request was sent. Left as None it follows `status`: a 4xx answer means not
    applied, anything else may have been. It decides what happens to a non-idempotent write:
    one that may have been applied is `uncertain` and never repeated; one that was not applied
    is retried when `retryable`.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        vendor_code: str | None = None,
        maybe_applied: bool | None = None,
        op: str = "",
    ) -> None:
        super().__init__(message, op=op, retryable=retryable)
        self.status = status
        self.vendor_code = vendor_code
        if maybe_applied is None:
            maybe_applied = not (status is not None and 400 <= status < 500)
        self.maybe_applied = maybe_applied


class OpUncertain(OpError):
    """A write started and never recorded its outcome (the process died mid-call).

    It may or may not have happened at the vendor, so remit does not call it again. A run now
    waits at a task for a person to say what happened (see `tasks.py`); this error is what a
    step recorded before tasks existed still raises when it is replayed.
    """

    def __init__(self, message: str, *, op: str, idempotency_key: str) -> None:
        super().__init__(message, op=op, retryable=False)
        self.idempotency_key = idempotency_key


class RunMovedOn(BaseException):
    """The run moved on from this attempt (it was cancelled, or a later attempt took over):
    the attempt starts no new write and ends without touching the run.

    Like `KeyboardInterrupt` it is not an `Exception`, so a workflow's `except Exception`
    around a call does not swallow it; re-raise it if you catch `BaseException`.
    """


class CodeChanged(BaseException):
    """The workflow's code no longer matches what its run recorded at a position it had
    passed (or stands at): a step inserted, removed, reordered or renamed before where the run
    had got to. Raised before anything runs at that position; the run fails with this message.

    `step` is the position, `recorded` what the run recorded there, `now` what the code does
    there now. Not an `Exception`, so a workflow's `except Exception` cannot swallow it and run
    on past the change.
    """

    def __init__(self, message: str, *, run_id: str, step: int, recorded: str, now: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.step = step
        self.recorded = recorded
        self.now = now


class RunTimedOut(BaseException):
    """The run went past its workflow's `timeout=` (counted from its start): raised before its
    next step, and the run fails with this message. Not an `Exception`, so a workflow's
    `except Exception` cannot swallow it and run on past its bound."""

    def __init__(self, message: str, *, run_id: str, timeout: float) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.timeout = timeout


class RetryRefused(RemitError):
    """A retry was refused, having written nothing: the run has not failed and was not
    cancelled, the step to carry on from is past where it got, or the retry key belongs to
    another run. The message says what to change."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class StepFailed(RemitError):
    """A `ctx.step` function raised. The same error is raised on the first run and on replay.

    `error_type` is the class name of what the function raised, `message` its text.
    """

    def __init__(self, message: str, *, step: str, error_type: str) -> None:
        super().__init__(message)
        self.step = step
        self.error_type = error_type


class ApprovalNotFound(RemitError):
    """No approval has that id."""


class Unauthenticated(RemitError):
    """A request's API token is missing, malformed, unknown, expired or revoked. The message
    says which, and never repeats the token."""


class InitRefused(RemitError):
    """`remit init` made nothing: its target exists, or the name is not one remit can load.
    The message names the path or the name, and what to give instead."""


class KeyReused(RemitError):
    """A key sent again with another request than the one it was first sent with. Nothing was
    written: a key names one request (send the first again to read its result)."""

    def __init__(self, what: str, key: str, first: str) -> None:
        super().__init__(
            f"{what} {key!r} was first used to {first}; this request is another one, so nothing "
            "was done: send it with a new key (the same key again replays only the first request)"
        )
        self.key = key
        self.first = first


class ChangeGoing(RemitError):
    """A change of a branch was refused: the branch has a change going (`change_id`, in the run
    `run_id`), and nothing was started."""

    def __init__(self, message: str, *, change_id: str, run_id: str) -> None:
        super().__init__(message)
        self.change_id = change_id
        self.run_id = run_id


class ChatNotFound(RemitError):
    """No chat with that id (or the app has no operator agent, `App(agent=...)`)."""


class ChatBusy(RemitError):
    """A message to a chat whose turn is still going (`run_id`): nothing was written."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class NoDraft(RemitError):
    """A chat's draft was asked for (to confirm, discard or try) and there is none, or not one
    that can be tried: nothing was done."""


class SendRefused(RemitError):
    """A message was refused and nothing was written: its run has finished (it waits for
    nothing more), or its topic is not a name a wait can use."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class ChildFailed(RemitError):
    """A child run the workflow waited for (`ctx.wait`) failed or was cancelled. `run_id`,
    `workflow` and `status` name it; `error` is its error, if it failed."""

    def __init__(self, *, run_id: str, workflow: str, status: str, error: str | None) -> None:
        said = f": {error}" if error else ""
        super().__init__(f"child run {run_id} of `{workflow}` {status}{said}")
        self.run_id = run_id
        self.workflow = workflow
        self.status = status
        self.error = error


class DecisionRefused(RemitError):
    """`decide()` refused the whole batch and wrote nothing.

    `reasons` lists every refusal as `(approval id, reason)`, so one answer tells the caller
    everything to fix.
    """

    def __init__(
        self, reasons: list[tuple[str, str]], *, by_policy: bool = False, what: str = "decision"
    ) -> None:
        listed = "; ".join(f"{approval_id} {reason}" for approval_id, reason in reasons)
        # `what` was refused: a decision, or the withdrawal of a gate by whoever asked for it.
        super().__init__(f"{what} refused, nothing was written: {listed}")
        self.reasons = reasons
        # Every reason is the policies' refusal (the caller may not; nothing else is wrong).
        self.by_policy = by_policy


class Suspended(BaseException):
    """The attempt stops here and the run waits (at a gate or a task), sleeps, or parks while
    the app is paused: the attempt ends holding nothing.

    Raised by `ctx.approval` while its gate is pending, by an op call whose outcome is unknown
    while its task is open, by a long `ctx.sleep`, and by a step that would start while the app
    is paused; caught by remit around the workflow function. Not an `Exception`, so a
    workflow's `except Exception` does not swallow it.
    """

    def __init__(
        self,
        status: Literal["waiting", "sleeping", "paused"],
        reason: str,
        *,
        approval_id: str | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.approval_id = approval_id
        self.task_id = task_id


class TaskNotFound(RemitError):
    """No task has that id."""


class TaskRefused(RemitError):
    """`Tasks.resolve` refused and wrote nothing. `reasons` lists every reason, so one answer
    tells the caller everything to fix."""

    def __init__(self, task_id: str, reasons: list[str], *, by_policy: bool = False) -> None:
        super().__init__(
            f"task {task_id} was not resolved, nothing was written: " + "; ".join(reasons)
        )
        self.task_id = task_id
        self.reasons = reasons
        # The policies' refusal is the only reason (the caller may not; nothing else is wrong).
        self.by_policy = by_policy
