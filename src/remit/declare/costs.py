"""What a call of an op costs: the cost model an op declares (`op(..., cost=...)`) and the
price table by model name it reads (`App(llm_prices=...)` over remit's defaults).

Declared here, with the ops that name them; `budgets/` bills the calls against the app's budgets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from remit.core.errors import AppError


@dataclass(frozen=True)
class Price:
    """A model's price in USD per million tokens, input (the prompt) and output (the reply)."""

    input: Decimal
    output: Decimal

    def __init__(self, input: Decimal | int | str, output: Decimal | int | str) -> None:
        for what, value in (("input", input), ("output", output)):
            amount = usd_amount(
                value,
                unreadable=f"Price({what}={value!r}): give USD per million tokens as a number, "
                'e.g. Price(input="0.15", output="0.60")',
                negative=f"Price({what}={value!r}) must be 0 or more USD per million tokens",
            )
            object.__setattr__(self, what, amount)


def usd_amount(value: Decimal | int | str, *, unreadable: str, negative: str) -> Decimal:
    """`value` as an amount of 0 or more: `AppError(unreadable)` when it is not a number,
    `AppError(negative)` when it is below 0 or not finite."""
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise AppError(unreadable) from None
    if not amount.is_finite() or amount < 0:
        raise AppError(negative)
    return amount


class CostModel(Protocol):
    """What one call of an op costs in USD: at most, before the call (what it reserves), and in
    fact, after it (what it settles at). `prices` is the app's price table by model name
    (`App(llm_prices=...)` over remit's defaults). `max_cost` raises, naming what to change, when
    it cannot price the call: the call is then refused before it is made."""

    def max_cost(self, input: Any, prices: Mapping[str, Price]) -> Decimal: ...

    def actual_cost(self, input: Any, output: Any, prices: Mapping[str, Price]) -> Decimal: ...
