"""Direct calls: one op called outside any workflow (`remit call`, `remit data`), by a person or
an agent, through the same ledger as a run's calls, and only as the app's policies allow.

A call given a `key` is idempotent: the same key again finds the call's ledger row and goes
as `reentry.py` decides for a run's call, except that it refuses where a run's call would
wait: it returns the recorded outcome, calls again when that is safe, or refuses (the key names
another call, or the earlier call's outcome is unknown).

A permit marked `@hold` lets the call happen only once someone approves it: the call becomes a
run of the built-in workflow `call`, which waits at an approval of the built-in type `call` and
makes the call, once, when it is approved.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

import sqlalchemy as sa
from pydantic import BaseModel, Field, ValidationError, model_validator

from remit.budgets.model import Budget
from remit.budgets.store import Budgets
from remit.connectors.base import Implementation
from remit.connectors.wakeup import WAKEUP_ACTOR
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import InputInvalid, RemitError
from remit.core.keys import key_problem
from remit.core.ledger import LedgerStore, input_hash
from remit.core.limits import check_json
from remit.core.outcome import Ok, Outcome
from remit.core.principals import SYSTEM_PREFIX, check_actor, check_principal
from remit.core.runs import RunInfo, RunStore, json_input
from remit.declare.costs import Price
from remit.declare.ops import Op
from remit.declare.resources import ResourceType
from remit.declare.workflows import Workflow, workflow
from remit.execution.calls import DIRECT_CALL_PREFIX, OpCaller
from remit.execution.context import Context
from remit.execution.reentry import Conflict, Hold, Replay, reenter
from remit.execution.tries import DEFAULT_OP_TIMEOUT
from remit.people.approvals import ApprovalType
from remit.people.tasks import TaskOpener
from remit.policy.cedar import HELD
from remit.policy.guard import Guard

if TYPE_CHECKING:
    from dbos import DBOSClient


class HeldCall(BaseModel):
    """The draft a held call's approver sees: which op, with what input, and why it waits."""

    op: str
    input: dict[str, Any]
    note: str = ""


class HeldCallInput(BaseModel):
    """The input of a `call` run."""

    op: str
    input: dict[str, Any]
    note: str = ""
    key: str = Field(default="", description="the caller's key, if the call was given one")


def held_call_type(ops: Mapping[str, Op[Any, Any]]) -> ApprovalType:
    """The built-in approval type `call`: its draft's input must parse against its op's input
    model, so an approver's edit is checked (and seen by the policies) as the call will be."""

    class HeldCallDraft(HeldCall):
        @model_validator(mode="after")
        def _input_parses(self) -> HeldCallDraft:
            op = ops.get(self.op)
            if op is None:
                raise ValueError(f"the app has no op `{self.op}`")
            unknown = sorted(set(self.input) - set(op.input.model_fields))
            if unknown:
                raise ValueError(
                    f"the input of `{op.id}` has no field {', '.join(unknown)} (its fields: "
                    f"{', '.join(op.input.model_fields)})"
                )
            try:
                self.input = parse_op_input(op, self.input)
            except InputInvalid as invalid:
                problems = "; ".join(
                    f"input.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                    for e in invalid.errors
                )
                raise ValueError(f"the input of `{op.id}` does not parse: {problems}") from None
            return self

    return ApprovalType(HELD, draft=HeldCallDraft, description="a direct call held by policy")


def held_call_workflow(ops: Mapping[str, Op[Any, Any]]) -> Workflow:
    """The built-in workflow `call`: wait for an approval, then make the held call once."""

    @workflow(name=HELD, input=HeldCallInput, uses=list(ops.values()))
    def held_call(ctx: Context, input: HeldCallInput) -> dict[str, Any]:
        decision = ctx.approval(
            "call",
            type=HELD,
            title=f"{ctx.actor} asks to call {input.op}"
            + (f": {input.note}" if input.note else ""),
            draft=HeldCall(op=input.op, input=input.input, note=input.note),
        )
        if not decision.approved:
            return {"outcome": decision.status}
        if decision.draft.op != input.op:
            raise RemitError(
                f"the approval of a held call changed its op from {input.op} to "
                f"{decision.draft.op}: only its input may be edited"
            )
        output = ctx.call(ops[input.op], decision.draft.input, key="call")
        return {"outcome": "called", "output": output.model_dump(mode="json")}

    return held_call


@dataclass(frozen=True)
class CallResult:
    """What a direct call came to: `ok` or `failed` (made now), or `held` (a run waits)."""

    status: Literal["ok", "failed", "held"]
    op: str
    idempotency_key: str | None = None
    output: Any = None
    error: str | None = None
    run_id: str | None = None
    note: str = ""
    replayed: bool = False

    @classmethod
    def of(cls, op: Op[Any, Any], key: str, outcome: Outcome, *, replayed: bool) -> CallResult:
        """What a call made now (or `replayed` from the ledger) came to."""
        if isinstance(outcome, Ok):
            return cls("ok", op.id, key, output=outcome.output, replayed=replayed)
        return cls("failed", op.id, key, error=outcome.message, replayed=replayed)


class CallingApp(Protocol):
    """What direct calls read of their app (`remit.app.App`, which sits above them and builds
    its `call` workflow from this module)."""

    @property
    def name(self) -> str: ...

    @property
    def ops(self) -> Mapping[str, Op[Any, Any]]: ...

    @property
    def workflows(self) -> Mapping[str, Workflow]: ...

    @property
    def resource_types(self) -> Mapping[str, ResourceType]: ...

    @property
    def budgets(self) -> tuple[Budget, ...]: ...

    @property
    def llm_prices(self) -> Mapping[str, Price]: ...


class DirectCalls:
    """Makes direct calls for one app: policy first, then the call (or a held run)."""

    def __init__(
        self,
        app: CallingApp,
        db: Database,
        client: DBOSClient,
        *,
        implementations: Mapping[str, Implementation],
        environ: Mapping[str, str],
        guard: Guard,
        clock: Clock | None = None,
        op_timeout: float = DEFAULT_OP_TIMEOUT,
    ) -> None:
        self.app = app
        self.db = db
        self.client = client
        self.guard = guard
        self.clock = clock or SystemClock()
        self.ledger = LedgerStore(db, clock=self.clock)
        self.caller = OpCaller(
            implementations=implementations,
            ledger=self.ledger,
            clock=self.clock,
            environ=environ,
            tasks=TaskOpener(db, app.name, clock=self.clock),
            budgets=Budgets(db, app.name, app.budgets, clock=self.clock),
            prices=app.llm_prices,
            op_timeout=op_timeout,
        )

    def call(
        self, op_id: str, payload: Mapping[str, Any], *, by: str, key: str | None = None
    ) -> CallResult:
        """Call `op_id` as `by`. `key` makes it idempotent: the same key again returns the
        first outcome (or the same held run) and calls nothing again.

        Raises `PolicyDenied` (recorded) when no policy permits it, `InputInvalid` when the
        input does not parse, and nothing is called or written in either case.
        """
        check_actor(by)
        op = self._op(op_id)
        problem = None if key is None else key_problem(key, what="key", longest=100, example="c-1")
        if problem is not None:
            raise RemitError(problem)
        parsed = parse_op_input(op, payload)
        verdict = self.guard.require(by, "call", op.id, {"input": parsed})
        if verdict.held:
            return self._hold(op, parsed, by=by, key=key, note=verdict.hold_note)
        return self._make(op, parsed, by=by, key=key)

    def call_as_remit(
        self, op_id: str, payload: Mapping[str, Any], *, actor: str = WAKEUP_ACTOR
    ) -> CallResult:
        """Call `op_id` as one of remit's own principals (`actor`, `remit:…`), for work remit
        does for itself (registering the instance's next wake before a worker stops): no policy
        is asked, as none is for expiry, and the call has its ledger and audit rows like any.
        Each is a call of its own, never a replay of an earlier one."""
        check_principal(actor, where="actor")
        if not actor.startswith(SYSTEM_PREFIX):
            raise RemitError(
                f"actor {actor}: call_as_remit acts as one of remit's own `{SYSTEM_PREFIX}` "
                "principals; a person or an agent calls with `call(..., by=...)`, under the "
                "policies"
            )
        op = self._op(op_id)
        return self._make(op, parse_op_input(op, payload), by=actor, key=None)

    def _make(
        self, op: Op[Any, Any], parsed: dict[str, Any], *, by: str, key: str | None
    ) -> CallResult:
        """Make a call the policies allowed (or did not ask about): its ledger row, then the
        audit row saying who made it."""
        call_id = f"{DIRECT_CALL_PREFIX}{uuid.uuid4().hex[:16]}"
        ledger_key = f"direct:{key}" if key else f"{call_id}:0"
        if key:
            answered = self._keyed(op, parsed, key, ledger_key)
            if answered is not None:
                return answered
        run = RunInfo(run_id=call_id, attempt=1, workflow_id=call_id, actor=by, direct=True)
        outcome = self.caller.call(run, op, parsed, step_id=0, key=ledger_key)
        result = CallResult.of(op, ledger_key, outcome, replayed=False)
        # The ledger row holds the call; the audit row says who made it, beside every other act.
        meta = {"op": op.id, "status": result.status}
        with self.db.begin() as conn:
            audit_row(
                conn,
                at=self.clock.now(),
                actor=by,
                action="op.called",
                target=ledger_key,
                meta=meta,
            )
        return result

    def _keyed(
        self, op: Op[Any, Any], parsed: dict[str, Any], key: str, ledger_key: str
    ) -> CallResult | None:
        """What the ledger already holds under the call's key: its outcome to replay, a
        refusal, or None when the call is to be made (or made again, when that is safe)."""
        existing = self.ledger.get(ledger_key)
        if existing is None:
            return None
        decision = reenter(existing, op, input_hash(parsed))
        if isinstance(decision, Conflict):
            other = "other input" if decision.same_op else f"`{existing.op_id}`"
            raise RemitError(
                f"--key {key} was used for a call of {other} ({_when(existing.started_at)}): "
                "give each call its own key. Nothing was called"
            )
        if isinstance(decision, Replay):
            return CallResult.of(op, ledger_key, decision.outcome, replayed=True)
        if isinstance(decision, Hold):
            raise RemitError(
                f"the call of `{op.id}` keyed {key} started {_when(existing.started_at)} and its "
                f"outcome is not recorded ({existing.status}): it may still be in progress, or "
                "the process making it stopped. It is not safe to repeat, so nothing was called: "
                "check with the vendor, and answer its task (`remit tasks`) if it has one"
            )
        # A person confirmed it did not happen (the op says what follows), or an idempotent
        # write that never finished: calling again is safe.
        return None

    def _op(self, op_id: str) -> Op[Any, Any]:
        op = self.app.ops.get(op_id)
        if op is None:
            known = sorted(self.app.ops)
            shown = ", ".join(known[:30]) + (", …" if len(known) > 30 else "")
            raise RemitError(f"app `{self.app.name}` has no op `{op_id}` (it has: {shown})")
        if op.acts_on_the_repo:
            raise RemitError(
                f"`{op.id}` acts on the operations repo at its forge, which only the built-in "
                "`change` does, with its checks and its review: open a change instead "
                "(`remit change open BRANCH`)"
            )
        for rtype in self.app.resource_types.values():
            if rtype.change_op(op.id):
                raise RemitError(
                    f"`{op.id}` changes a declared {rtype.id}, which only the built-in `apply` "
                    "does: change the data file (resources/*.py), then `remit plan` and "
                    "`remit apply`"
                )
        return op

    def _hold(
        self, op: Op[Any, Any], parsed: dict[str, Any], *, by: str, key: str | None, note: str
    ) -> CallResult:
        """Start the `call` run that waits for an approval; a repeated key finds the first."""
        held = self.app.workflows.get(HELD)
        if held is None:
            raise RemitError(
                f"a policy holds {op.id} for an approval, but app `{self.app.name}` has no "
                "`call` workflow: held calls need the app's policies folder"
            )
        runs = RunStore(self.db, clock=self.clock, app=self.app.name)
        wanted = {"op": op.id, "input": parsed, "note": note, "key": key or ""}
        if not key:
            run = runs.start(self.client, held, wanted, started_by=by)
            return CallResult(status="held", op=op.id, run_id=run.run_id, note=note)
        run_id = "held_" + hashlib.sha256(f"{by}\n{key}".encode()).hexdigest()[:16]
        found = runs.find(run_id)
        if found is None:
            try:
                run = runs.start(self.client, held, wanted, started_by=by, run_id=run_id)
                return CallResult(status="held", op=op.id, run_id=run.run_id, note=note)
            except sa.exc.IntegrityError:
                found = runs.get(run_id)  # the same key, held at the same moment elsewhere
        if (found.input.get("op"), found.input.get("input")) != (op.id, parsed):
            raise RemitError(
                f"--key {key} was used for a held call of `{found.input.get('op')}` with other "
                f"input (run {run_id}): give each call its own key. Nothing was held"
            )
        return CallResult(status="held", op=op.id, run_id=run_id, note=note, replayed=True)


def _when(at: datetime) -> str:
    return f"at {at:%Y-%m-%d %H:%M:%S} UTC"


def parse_op_input(op: Op[Any, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """`payload` parsed against the op's input model, as JSON. Raises `InputInvalid` naming
    each field that does not parse (or holds a NUL character), `TooLarge` past
    `REMIT_MAX_OP_BYTES`."""
    check_json(payload, what=f"the input to `{op.id}`", cap="op_bytes", target=op.id)
    try:
        model = op.input.model_validate(dict(payload))
    except ValidationError as error:
        raise InputInvalid.of(
            error, what=f"input to `{op.id}`", target=op.id, after="Nothing was called"
        ) from None
    return json_input(model, what=f"input to `{op.id}`", target=op.id)
