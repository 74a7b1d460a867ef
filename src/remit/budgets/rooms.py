"""`client.budgets`: the app's budget periods, their drift, and setting a period's limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from remit.core import limits
from remit.core.acting import Acting

if TYPE_CHECKING:
    from decimal import Decimal

    from remit.budgets.model import PeriodState
    from remit.budgets.store import Budgets


class BudgetChecks(Protocol):
    """The policies' check, for the act this room takes (`policy.guard.Guard`)."""

    def require(
        self,
        principal: str,
        action: Literal["set_budget"],
        resource: str,
        context: Mapping[str, Any],
    ) -> object: ...


class BudgetServices(Protocol):
    """The client's services this room uses."""

    @property
    def guard(self) -> BudgetChecks: ...
    @property
    def budgets(self) -> Budgets: ...


class BudgetsClient(Acting, Protocol):
    """The client as this room sees it."""

    @property
    def services(self) -> BudgetServices: ...


class BudgetsRoom:
    """`client.budgets`: read the periods, and set a limit as the policies allow."""

    def __init__(self, client: BudgetsClient) -> None:
        self._client = client

    def periods(self, *, limit: int = 50) -> list[tuple[PeriodState, Decimal]]:
        """Each budget period, newest first, with its drift (the counter less its ledger)."""
        from decimal import Decimal

        limits.check_limit(limit, where="budgets.periods")
        states = self._client.services.budgets.periods(limit=limit)
        drift = {
            (d.scope, d.period): d.drift_usd for d in self._client.services.budgets.drift(states)
        }
        return [(state, drift.get((state.scope, state.period), Decimal(0))) for state in states]

    def set(
        self,
        scope: str,
        limit: Decimal | int | str,
        *,
        period: str | None = None,
        by: str | None = None,
    ) -> PeriodState:
        """Set the limit of a budget's period (None: the current one), as the policies allow
        (`set_budget` on the budget's scope, with the period and the new limit)."""
        who = self._client.person(by)
        context = {"period": period or "current", "limit": str(limit)}
        self._client.services.guard.require(who, "set_budget", scope, context)
        return self._client.services.budgets.raise_limit(scope, period, limit, by=who)
