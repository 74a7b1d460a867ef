"""Operations: what a connector says a vendor can do, with typed input and output."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from pydantic import BaseModel

from remit.core.backoff import DEFAULT_RETRY, RetryPolicy
from remit.core.errors import AppError

if TYPE_CHECKING:
    from remit.declare.costs import CostModel

Effect = Literal["read", "write"]
# What a person's "it did not happen" (resolving a task `--not-done`) does to the run.
NotDone = Literal["retry", "fail"]

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)

_PART = r"[a-z][a-z0-9_]*"
# An app's collections' ops have four parts: `data.<app>.<collection>.<op>`.
_OP_ID = re.compile(rf"^(?:{_PART}\.{_PART}\.{_PART}|data\.{_PART}\.{_PART}\.{_PART})$")


@dataclass(frozen=True, eq=False)
class Op(Generic[In, Out]):
    """One vendor operation, `<vendor>.<resource>.<op>`, e.g. `payments.invoices.get`.

    `effect` says whether it changes anything at the vendor. `idempotent` promises that calling
    it twice with the same idempotency key has the effect of calling it once (as Stripe's keyed
    requests do); only reads and idempotent writes are retried.

    `on_not_done` says what happens when a call's outcome was unknown and a person confirms it
    did not happen: `"retry"` calls the op again with the same idempotency key, `"fail"` (the
    default) fails the run saying so.

    `timeout` bounds one try of a call, in seconds (default: `REMIT_OP_TIMEOUT`). A try that
    takes longer is given up on: a read or an idempotent write is tried again under `retry`;
    a write that is not idempotent may have reached the vendor, so its call becomes
    `uncertain` and a person is asked (the driver's thread is left to finish on its own).
    """

    id: str
    effect: Effect
    input: type[In]
    output: type[Out]
    idempotent: bool = False
    description: str = ""
    retry: RetryPolicy = field(default=DEFAULT_RETRY)
    on_not_done: NotDone = "fail"
    # What a call costs (see `declare.costs.CostModel`): a call of an op with a cost is billed to the
    # app's budgets, and refused before it is made when it could pass one.
    cost: CostModel | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        if not _OP_ID.fullmatch(self.id):
            raise AppError(
                f"op id `{self.id}` must be `<vendor>.<resource>.<op>`, each part lowercase "
                "letters, digits and underscores starting with a letter, e.g. `payments.invoices.get`"
            )
        if self.effect not in ("read", "write"):
            raise AppError(f"op `{self.id}` has effect `{self.effect}`: use `read` or `write`")
        for what, model in (("input", self.input), ("output", self.output)):
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise AppError(f"op `{self.id}`: its {what} must be a pydantic model class")
        if self.on_not_done not in ("retry", "fail"):
            raise AppError(
                f'op `{self.id}` has on_not_done={self.on_not_done!r}: use "retry" (call it '
                'again with the same key) or "fail" (fail the run)'
            )
        if self.effect == "read" and self.on_not_done != "fail":
            raise AppError(
                f"op `{self.id}` is a read, whose outcome is never unknown: on_not_done applies "
                "to writes only; leave it out"
            )
        if self.timeout is not None and not (
            isinstance(self.timeout, int | float)
            and not isinstance(self.timeout, bool)
            and 0 < self.timeout < float("inf")
        ):
            raise AppError(
                f"op `{self.id}` has timeout={self.timeout!r}: give the seconds one try may take, "
                "a number greater than 0, e.g. timeout=30"
            )
        if self.cost is not None and not all(
            callable(getattr(self.cost, method, None)) for method in ("max_cost", "actual_cost")
        ):
            raise AppError(
                f"op `{self.id}` has cost={self.cost!r}: give an object with max_cost(input, "
                "prices) and actual_cost(input, output, prices), each returning Decimal USD"
            )

    @property
    def vendor(self) -> str:
        return self.id.split(".")[0]

    @property
    def resource(self) -> str:
        """The middle of the id: `invoices`, or an app's collection, `ar.contacts`."""
        return self.id.split(".", 1)[1].rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.rsplit(".", 1)[1]

    @property
    def acts_on_the_repo(self) -> bool:
        """True for remit's ops on the operations repo at its forge (`remit.change.*`), which
        only the built-in `change` workflow calls: no workflow of an app's lists them, and no
        direct call makes them."""
        return self.vendor == "remit" and self.resource == "change"

    @property
    def safe_to_repeat(self) -> bool:
        """True when calling again with the same key cannot double the effect."""
        return self.effect == "read" or self.idempotent

    def __repr__(self) -> str:
        return f"Op({self.id!r}, {self.effect}{', idempotent' if self.idempotent else ''})"


def op(
    id: str,
    *,
    effect: Effect,
    input: type[In],
    output: type[Out],
    idempotent: bool = False,
    description: str = "",
    retry: RetryPolicy = DEFAULT_RETRY,
    on_not_done: NotDone = "fail",
    cost: CostModel | None = None,
    timeout: float | None = None,
) -> Op[In, Out]:
    """Declare an operation. See `Op`."""
    return Op(
        id=id,
        effect=effect,
        input=input,
        output=output,
        idempotent=idempotent,
        description=description,
        retry=retry,
        on_not_done=on_not_done,
        cost=cost,
        timeout=timeout,
    )
