"""Scenario steps a connector offers: givens that seed its fake, thens that read it.

A connector declares its steps once, and every app using it can say them in its scenarios
(`scenarios/*.feature`, run by `remit test`):

    payments_steps = steps("payments")

    @payments_steps.given("an invoice {id} of {amount:d} due {due}")
    def an_invoice(id: str, amount: int, due: str) -> Given:
        return Given(op=create_invoice, input={...}, actor="user:ann", name="invoice")

    @payments_steps.then("the invoice {id} has {n:d} reminders")
    def reminders(fake: FakePayments, id: str, n: int) -> None:
        sent = fake.invoices[id].reminders_sent
        assert sent == n, f"the invoice {id} has {sent} reminders, not {n}"

    payments = Connector("payments", ..., steps=payments_steps)

A given returns what to call; the scenario calls that op on the fakes, as the actor, and
keeps the output under `name` (`$invoice.invoice_id` in later steps). A then is called with
the vendor's fake and the step's values, and asserts with a message that says what it found (a
failing then's report shows the message and the values it was called with). Patterns are `parse` formats: `{name}`
matches text, `{name:d}` a whole number. A step with a table gets it as `table` (a list of
rows, each a dict by the header), one with a docstring gets it as `doc`, when the function
takes that parameter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import parse
from pydantic import BaseModel

from remit.core.errors import AppError
from remit.declare.ops import Op

StepKind = Literal["given", "then"]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Given:
    """What a connector's given does: call `op` with `input`, as `actor` (default: the
    scenario's own actor), and keep the output under `name` for later steps to refer to."""

    op: Op[Any, Any] | str
    input: Mapping[str, Any] | BaseModel = field(default_factory=dict)
    actor: str | None = None
    name: str | None = None

    @property
    def op_id(self) -> str:
        return self.op if isinstance(self.op, str) else self.op.id

    def input_json(self) -> dict[str, Any]:
        if isinstance(self.input, BaseModel):
            return self.input.model_dump(mode="json")
        return dict(self.input)


@dataclass(frozen=True)
class StepDefinition:
    """One sentence a connector's scenarios may say, and the function that does it."""

    vendor: str
    kind: StepKind
    pattern: str
    fn: Callable[..., Any]
    matcher: parse.Parser = field(repr=False, compare=False)

    def match(self, text: str) -> dict[str, Any] | None:
        """The step's values when `text` is this sentence, else None."""
        found = self.matcher.parse(text)
        if not isinstance(found, parse.Result):
            return None
        return dict(found.named)

    def takes(self, parameter: str) -> bool:
        return parameter in inspect.signature(self.fn).parameters

    @property
    def where(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"


class StepSet:
    """The steps of one vendor's connector: `@steps.given(pattern)` and `@steps.then(pattern)`."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.definitions: list[StepDefinition] = []

    def given(self, pattern: str) -> Callable[[F], F]:
        """Declare a given: the function takes the pattern's values and returns a `Given`."""
        return self._add("given", pattern)

    def then(self, pattern: str) -> Callable[[F], F]:
        """Declare a then: the function takes the vendor's fake, then the pattern's values,
        and asserts (an `AssertionError`'s message is what the scenario's failure shows)."""
        return self._add("then", pattern)

    def _add(self, kind: StepKind, pattern: str) -> Callable[[F], F]:
        try:
            matcher = parse.compile(pattern, case_sensitive=True)
        except (ValueError, TypeError) as error:
            raise AppError(
                f"the {self.vendor} step {pattern!r} is not a pattern remit can read ({error}): "
                "write values as {name} or {name:d}"
            ) from None
        if matcher.fixed_fields:
            raise AppError(
                f"the {self.vendor} step {pattern!r} has an unnamed value: name each, as {{name}}"
            )

        def declare(fn: F) -> F:
            if any(taken.pattern == pattern for taken in self.definitions):
                raise AppError(f"the {self.vendor} connector declares the step {pattern!r} twice")
            self.definitions.append(StepDefinition(self.vendor, kind, pattern, fn, matcher))
            return fn

        return declare

    def __repr__(self) -> str:
        return f"steps({self.vendor!r}: {len(self.definitions)} steps)"


def steps(vendor: str) -> StepSet:
    """The scenario steps of `vendor`'s connector, to declare with `.given` and `.then` and
    pass as `Connector(..., steps=...)`."""
    return StepSet(vendor)
