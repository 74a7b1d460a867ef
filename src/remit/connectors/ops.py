"""Operations: what a connector says a vendor can do, with typed input and output."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

from remit.errors import AppError
from remit.retry import DEFAULT_RETRY, RetryPolicy

Effect = Literal["read", "write"]

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)

_PART = r"[a-z][a-z0-9_]*"
_OP_ID = re.compile(rf"^{_PART}\.{_PART}\.{_PART}$")


@dataclass(frozen=True, eq=False)
class Op(Generic[In, Out]):
    """One vendor operation, `<vendor>.<resource>.<op>`, e.g. `payments.invoices.get`.

    `effect` says whether it changes anything at the vendor. `idempotent` promises that calling
    it twice with the same idempotency key has the effect of calling it once (as Stripe's keyed
    requests do); only reads and idempotent writes are retried.
    """

    id: str
    effect: Effect
    input: type[In]
    output: type[Out]
    idempotent: bool = False
    description: str = ""
    retry: RetryPolicy = field(default=DEFAULT_RETRY)

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

    @property
    def vendor(self) -> str:
        return self.id.split(".")[0]

    @property
    def resource(self) -> str:
        return self.id.split(".")[1]

    @property
    def name(self) -> str:
        return self.id.split(".")[2]

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
    )
