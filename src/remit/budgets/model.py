"""Budgets: what an app, or one of its workflows, may spend per period on calls that cost money.

An op with a cost (`op(..., cost=...)`, such as the `llm` connector's chat completion) is billed
to every budget period that applies to it: the app's (`Budget(limit)`) and its workflow's
(`Budget(limit, workflow="name")`), each per month, week or day (UTC, from the injected clock).

Reserve first, then call. Before the call, one transaction locks the call's period rows (in
(scope, period) order), refuses the call with `BudgetExceeded` if spent + reserved + the call's
most it can cost would pass any period's limit, and otherwise adds that most to `reserved` and
writes the call's reservation. After the call, one transaction writes the call's ledger row
with its cost, takes the reservation off `reserved` and adds the actual cost to `spent`
(settled); a call that failed releases its reservation instead. Checking the counter and adding
to it later would let concurrent calls each see room and together overspend.

A reservation left `reserved` by a process that died mid-call is taken over by the call when its
step runs again, or released by the reconciler once the call's attempt has ended (see
`orphaned`). The reconciler also compares each period's `spent` with the sum of its settled
calls' ledger costs and reports any drift; it never corrects it.

This module declares and decides: budgets, periods, the arithmetic and the refusals, as
plain functions over frozen values. `budgets/store.py` keeps the periods and reservations in the
app's database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Literal, get_args

from remit.core.errors import AppError, BudgetExceeded
from remit.declare.apps import caller_app, qualified
from remit.declare.costs import usd_amount
from remit.declare.workflows import check_name, check_qualified

PeriodKind = Literal["month", "week", "day"]
APP_SCOPE = "app"
# A direct call's reservation (no run to tell whether it is still going) left `reserved` this
# long was left by a process that died: a call takes seconds, with its retries minutes.
DIRECT_LEASE = timedelta(hours=1)
ADJECTIVES = {"month": "monthly", "week": "weekly", "day": "daily"}

_MICRO = Decimal("0.000001")

Charge = tuple[str, str]  # (scope, period key)


def money(value: Decimal | int | str) -> Decimal:
    """An amount in USD to the micro-dollar, rounded up: what remit stores and compares."""
    return Decimal(value).quantize(_MICRO, rounding=ROUND_CEILING)


def usd(value: Decimal) -> str:
    """An amount as a person reads it: `$12.50`, or every digit that matters (`$0.000123`)."""
    sign, value = ("-", -value) if value < 0 else ("", value)
    if value == value.quantize(Decimal("0.01")):
        return f"{sign}${value:,.2f}"
    return f"{sign}${value.normalize():f}"


@dataclass(frozen=True)
class Budget:
    """A spending limit in USD per period (`month`, the default; `week`, ISO weeks; `day`), for
    the whole app or, with `workflow=`, for one workflow's runs. A call counts against every
    budget that applies to it, and is refused if any would pass its limit.

        App(..., budgets=[Budget(Decimal("50")), Budget(Decimal("5"), "day", workflow="chase")])
    """

    limit_usd: Decimal
    period: PeriodKind = "month"
    workflow: str | None = None

    def __init__(
        self,
        limit_usd: Decimal | int | str,
        period: PeriodKind = "month",
        *,
        workflow: str | None = None,
    ) -> None:
        limit = usd_amount(
            limit_usd,
            unreadable=f"Budget({limit_usd!r}): give the limit in USD as a number, e.g. "
            'Budget(Decimal("50"))',
            negative=f"Budget({limit_usd!r}): the limit must be 0 or more USD",
        )
        if period not in get_args(PeriodKind):
            raise AppError(
                f"Budget(period={period!r}): use 'month', 'week' or 'day' (periods are in UTC)"
            )
        if workflow is not None:
            # Declared in an app's folder, a budget names that app's workflow (`<app>.<name>`).
            app = caller_app(2)
            if app is not None and "." not in workflow:
                check_name("Budget(workflow=...): workflow", workflow)
                workflow = qualified(app, workflow)
            check_qualified("Budget(workflow=...): workflow", workflow)
        object.__setattr__(self, "limit_usd", money(limit))
        object.__setattr__(self, "period", period)
        object.__setattr__(self, "workflow", workflow)

    @property
    def scope(self) -> str:
        """`app`, or `workflow:<name>`."""
        return APP_SCOPE if self.workflow is None else f"workflow:{self.workflow}"


def period_key(kind: PeriodKind, at: datetime) -> str:
    """The period `at` falls in: `2026-11` (month), `2026-W48` (ISO week), `2026-11-29` (day)."""
    at = at.astimezone(UTC)
    if kind == "month":
        return f"{at:%Y-%m}"
    if kind == "week":
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    return f"{at:%Y-%m-%d}"


def period_bounds(key: str) -> tuple[PeriodKind, datetime, datetime]:
    """The kind of the period `key` names, and when it starts and ends (UTC). Raises
    `ValueError` for a key of no period's form."""
    try:
        if "-W" in key:
            year, week = key.split("-W")
            start = datetime.combine(
                date.fromisocalendar(int(year), int(week), 1), datetime.min.time()
            )
            return "week", start.replace(tzinfo=UTC), start.replace(tzinfo=UTC) + timedelta(weeks=1)
        parts = [int(part) for part in key.split("-")]
        if len(parts) == 3 and key == f"{parts[0]:04d}-{parts[1]:02d}-{parts[2]:02d}":
            start = datetime(parts[0], parts[1], parts[2], tzinfo=UTC)
            return "day", start, start + timedelta(days=1)
        if len(parts) == 2 and key == f"{parts[0]:04d}-{parts[1]:02d}":
            start = datetime(parts[0], parts[1], 1, tzinfo=UTC)
            end = datetime(parts[0] + parts[1] // 12, parts[1] % 12 + 1, 1, tzinfo=UTC)
            return "month", start, end
    except ValueError:
        pass
    raise ValueError(
        f"period {key!r} is none of `2026-11` (a month), `2026-W48` (an ISO week) or "
        "`2026-11-29` (a day)"
    )


@dataclass(frozen=True)
class PeriodState:
    """One budget period's row: its limit, what settled calls spent, what calls in flight may
    still cost at most, and who set the limit by hand (None: it follows the declaration)."""

    scope: str
    period: str
    limit_usd: Decimal
    spent_usd: Decimal
    reserved_usd: Decimal
    updated_at: datetime | None = None
    limit_set_by: str | None = None

    def refuses(self, requested: Decimal) -> bool:
        """Whether reserving `requested` more would take the period past its limit."""
        return self.spent_usd + self.reserved_usd + requested > self.limit_usd


@dataclass(frozen=True)
class Reservation:
    """What one call reserved, against which periods, and where it stands: `reserved` (the
    call is in flight), `settled` (at `cost_usd`) or `released` (the call failed, or ended
    without settling)."""

    id: str
    idempotency_key: str
    run_id: str
    workflow_id: str
    op_id: str
    periods: tuple[Charge, ...]
    reserved_usd: Decimal
    status: str
    cost_usd: Decimal | None
    created_at: datetime


@dataclass(frozen=True)
class Drift:
    """A period whose counter is not the sum of its settled calls' ledger costs."""

    scope: str
    period: str
    spent_usd: Decimal
    ledger_usd: Decimal

    @property
    def drift_usd(self) -> Decimal:
        """The counter less the ledger: more than 0 when the counter says more was spent."""
        return self.spent_usd - self.ledger_usd


def refusal(op_id: str, state: PeriodState, requested: Decimal) -> BudgetExceeded:
    """The error that refuses a call whose reservation `requested` would pass `state`'s limit."""
    kind, _, _ = period_bounds(state.period)
    whose = (
        "the app's"
        if state.scope == APP_SCOPE
        else f"workflow `{state.scope.removeprefix('workflow:')}`'s"
    )
    return BudgetExceeded(
        f"`{op_id}` was not called: {whose} {ADJECTIVES[kind]} budget for {state.period} is "
        f"{usd(state.limit_usd)}, with {usd(state.spent_usd)} spent and "
        f"{usd(state.reserved_usd)} reserved by calls in flight, and this call may cost up to "
        f"{usd(requested)}. Raise the limit (`remit budgets set-limit --scope {state.scope} "
        f"--period {state.period} --limit USD`, or `ctx.raise_budget(...)` once someone "
        "approves), or wait for the next period",
        op=op_id,
        scope=state.scope,
        period=state.period,
        limit=state.limit_usd,
        spent=state.spent_usd,
        reserved=state.reserved_usd,
        requested=requested,
    )


def orphaned(
    reservation: Reservation,
    *,
    run: tuple[str, str] | None,
    attempt_status: str | None,
    now: datetime,
) -> str | None:
    """Why a `reserved` reservation will never be settled, or None while its call may still
    settle it. `run` is its run's (current workflow id, status), None for a direct call (no
    run); `attempt_status` is DBOS's status of the reservation's attempt, None if unknown."""
    if run is None:
        if now - reservation.created_at > DIRECT_LEASE:
            return f"a direct call reserved it {_age(now - reservation.created_at)} ago"
        return None
    current, status = run
    if current != reservation.workflow_id:
        return f"its run moved on to {current}"
    if status not in ("queued", "running"):
        return f"its run is {status}"
    if attempt_status is not None and attempt_status not in ("PENDING", "ENQUEUED"):
        return f"its attempt ended {attempt_status}"
    return None


def _age(left: timedelta) -> str:
    hours = left.total_seconds() / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"
