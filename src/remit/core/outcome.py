"""What an op call or a `ctx.step` came to: `Ok` with its output, or `Failed` with a `Failure`.

An outcome is what the call's DBOS step returns, so DBOS checkpoints it and a replay of the step
gets it back; the run's `ctx` then unwraps it into the output or the typed error, the same on the
first run and on every replay (DBOS's JSON serializer would bring an exception back as a generic
one). A failed call's ledger row keeps its `Failure` in the `error_info` column.

Both are stored as JSON in the form remit has always written, so a step recorded and a row
written by an earlier version read back the same:

    {"ok": <the output as JSON>}
    {"error": {"kind": "driver", "message": "...", "retryable": false, "status": 422, ...}}

The ledger's `error_info` holds the inner `{"kind": ..., "message": ..., ...}`. A failure's
`kind` picks its model; a kind this version does not know reads as a `CallFailure`, as it
always raised the plain `OpError`. Fields a model does not declare are kept as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from remit.core.errors import (
    BudgetExceeded,
    DriverError,
    MissingCredential,
    OpError,
    OpUncertain,
    RunMovedOn,
    StepFailed,
    Suspended,
)


class _Failure(BaseModel):
    """What every failure has: its kind and a message that says what to do."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str
    message: str

    def exception(self, name: str) -> BaseException:
        """The error a workflow sees for this failure of the op (or step) `name`."""
        return OpError(self.message, op=name)


class DriverFailure(_Failure):
    """The driver failed (or raised something else, or answered output that does not parse),
    and remit stopped trying."""

    kind: Literal["driver"] = "driver"
    retryable: bool = False
    status: int | None = None
    vendor_code: str | None = None
    maybe_applied: bool | None = None

    # Read as leniently as drivers write them (a vendor's numeric code, a null flag), and as
    # earlier versions read their records: a failure recorded is never one that cannot be read.
    @field_validator("retryable", mode="before")
    @classmethod
    def _flag(cls, value: Any) -> bool:
        return bool(value)

    @field_validator("maybe_applied", mode="before")
    @classmethod
    def _maybe(cls, value: Any) -> bool | None:
        return None if value is None else bool(value)

    @field_validator("vendor_code", mode="before")
    @classmethod
    def _code(cls, value: Any) -> str | None:
        return None if value is None else str(value)

    @field_validator("status", mode="before")
    @classmethod
    def _status(cls, value: Any) -> int | None:
        if isinstance(value, bool) or value is None:
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    @classmethod
    def of(cls, error: DriverError) -> DriverFailure:
        return cls(
            message=str(error),
            retryable=error.retryable,
            status=error.status,
            vendor_code=error.vendor_code,
            maybe_applied=error.maybe_applied,
        )

    def exception(self, name: str) -> DriverError:
        return DriverError(
            self.message,
            retryable=self.retryable,
            status=self.status,
            vendor_code=self.vendor_code,
            maybe_applied=self.maybe_applied,
            op=name,
        )


class CredentialFailure(_Failure):
    """The driver needs a credential (`variable`) that is not set or cannot be read."""

    kind: Literal["credential"] = "credential"
    variable: str

    def exception(self, name: str) -> MissingCredential:
        return MissingCredential(self.message, op=name, variable=self.variable)


class BudgetFailure(_Failure):
    """Reserving the call's most would take a budget period past its limit: not called."""

    kind: Literal["budget"] = "budget"
    scope: str
    period: str
    limit: Decimal
    spent: Decimal
    reserved: Decimal
    requested: Decimal

    @classmethod
    def of(cls, refused: BudgetExceeded) -> BudgetFailure:
        return cls(
            message=str(refused),
            scope=refused.scope,
            period=refused.period,
            limit=refused.limit,
            spent=refused.spent,
            reserved=refused.reserved,
            requested=refused.requested,
        )

    def exception(self, name: str) -> BudgetExceeded:
        return BudgetExceeded(
            self.message,
            op=name,
            scope=self.scope,
            period=self.period,
            limit=self.limit,
            spent=self.spent,
            reserved=self.reserved,
            requested=self.requested,
        )


class MovedOnFailure(_Failure):
    """The run moved on from the calling attempt (cancelled, or taken over): not called."""

    kind: Literal["moved"] = "moved"

    def exception(self, name: str) -> RunMovedOn:
        return RunMovedOn(self.message)


class UncertainFailure(_Failure):
    """A write may or may not have happened. With a `task_id` the run waits for a person to
    answer that task; without one (a step recorded before tasks existed) it fails."""

    kind: Literal["uncertain"] = "uncertain"
    idempotency_key: str
    task_id: str | None = None

    def exception(self, name: str) -> Suspended | OpUncertain:
        if self.task_id:
            return Suspended("waiting", self.message, task_id=self.task_id)
        return OpUncertain(self.message, op=name, idempotency_key=self.idempotency_key)


class StepFailure(_Failure):
    """A `ctx.step` function raised (an `error_type`), or returned a value that is not JSON."""

    kind: Literal["step"] = "step"
    error_type: str = ""

    def exception(self, name: str) -> StepFailed:
        return StepFailed(self.message, step=name, error_type=self.error_type)


class CallFailure(_Failure):
    """Any other failure of a call, raised as `OpError`: `cost` (the call could not be priced),
    `key` (its idempotency key names another call), `not_done` (a person said it did not
    happen, and the op fails then), `failed` (a ledger row that names no kind)."""

    kind: str = "failed"


# The kinds with a model of their own; any other kind is a `CallFailure`.
_OWN_MODEL = frozenset({"driver", "credential", "budget", "moved", "uncertain", "step"})


def _failure_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    return kind if kind in _OWN_MODEL else "other"


Failure = Annotated[
    Annotated[DriverFailure, Tag("driver")]
    | Annotated[CredentialFailure, Tag("credential")]
    | Annotated[BudgetFailure, Tag("budget")]
    | Annotated[MovedOnFailure, Tag("moved")]
    | Annotated[UncertainFailure, Tag("uncertain")]
    | Annotated[StepFailure, Tag("step")]
    | Annotated[CallFailure, Tag("other")],
    Discriminator(_failure_tag),
]


class Ok(BaseModel):
    """The call answered: `output` is its output as JSON."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    output: Any = Field(alias="ok")

    def unwrap(self, name: str) -> Any:
        """The output (`name`, the op or step, names it in the error a failure raises)."""
        return self.output

    def to_json(self) -> dict[str, Any]:
        # The output is JSON already: kept as it is, not serialized again (pydantic would turn
        # a NaN a step returned into null).
        return {"ok": self.output}


class Failed(BaseModel):
    """The call failed, or was not made: `failure` says how."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    failure: Failure = Field(alias="error")

    @property
    def message(self) -> str:
        return self.failure.message

    def unwrap(self, name: str) -> NoReturn:
        """Raise the failure's error for the op (or step) `name`."""
        raise self.failure.exception(name)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _outcome_tag(value: Any) -> str:
    if isinstance(value, Mapping):
        return "ok" if "ok" in value else "error"
    return "ok" if isinstance(value, Ok) else "error"


Outcome = Annotated[
    Annotated[Ok, Tag("ok")] | Annotated[Failed, Tag("error")], Discriminator(_outcome_tag)
]

_outcomes: TypeAdapter[Outcome] = TypeAdapter(Outcome)
_failures: TypeAdapter[Failure] = TypeAdapter(Failure)


def parse_outcome(value: Any) -> Outcome:
    """An outcome from its JSON form (a step's checkpoint, of this version or an earlier one)."""
    if _outcome_tag(value) == "error" and isinstance(value, Mapping):
        error = value.get("error")
        if isinstance(error, Mapping):
            return failed(error)
    return _outcomes.validate_python(value)


def failed(value: Mapping[str, Any]) -> Failed:
    """A failed outcome from its failure's JSON form (see `parse_failure`)."""
    # Built as it is: a failure read as a `CallFailure` keeps the kind it was recorded with,
    # which the union would send back to that kind's model.
    return Failed.model_construct(failure=parse_failure(value))


def parse_failure(value: Mapping[str, Any]) -> Failure:
    """A failure from its JSON form (a ledger row's `error_info`). One recorded with fields its
    kind's model cannot read is read as a `CallFailure` with them all: it raises `OpError`
    with its message rather than failing the run that reads it back."""
    try:
        return _failures.validate_python(value)
    except ValidationError:
        fields = {str(name): field for name, field in value.items() if name != "kind"}
        fields["message"] = str(value.get("message") or "the call failed")
        return CallFailure(kind=str(value.get("kind") or "failed"), **fields)
