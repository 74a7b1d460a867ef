"""Budgets in the app's database: each period's row (its limit, `spent` and `reserved`) and each
call's reservation, moved only in transactions that lock the call's reservation row first, then
its period rows in (scope, period) order. What the rows mean, and what the arithmetic decides,
is in `budgets.py`."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import sqlalchemy as sa

from remit.budgets.model import (
    ADJECTIVES,
    Budget,
    Charge,
    Drift,
    PeriodState,
    Reservation,
    money,
    period_bounds,
    period_key,
    refusal,
    usd,
)
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.schema import UTCDateTime, budget_periods, reservations, runs

log = logging.getLogger("remit.budgets")

# Writes a call's ledger row on the connection of the transaction that settles or releases it.
Recorder = Callable[[sa.Connection], bool]


class Budgets:
    """The budget periods and reservations of one app, in its database."""

    def __init__(
        self, db: Database, app: str, declared: Iterable[Budget] = (), *, clock: Clock | None = None
    ) -> None:
        self.db = db
        self.app = app
        self.declared = tuple(declared)
        self.clock = clock or SystemClock()

    def charges(self, workflow: str | None, at: datetime) -> dict[Charge, Decimal]:
        """The periods a call of `workflow`'s (None: a direct call) made at `at` counts against,
        each with its declared limit."""
        return {
            (budget.scope, period_key(budget.period, at)): budget.limit_usd
            for budget in self.declared
            if budget.workflow is None or budget.workflow == workflow
        }

    def reserve(
        self,
        *,
        op_id: str,
        key: str,
        run_id: str,
        workflow_id: str,
        workflow: str | None,
        max_cost: Decimal,
    ) -> Reservation | None:
        """Reserve `max_cost` for the call keyed `key` in every period it counts against, in one
        transaction; None when no budget applies to it.

        Raises `BudgetExceeded` (nothing written) when a period would pass its limit. A call
        that already has a reservation (its step runs again after a crash) takes it over; one
        already settled is returned as it is, and the caller replays the call's ledger row.
        """
        now = self.clock.now()
        wanted = self.charges(workflow, now)
        if not wanted:
            return None
        amount = money(max_cost)

        def write() -> Reservation:
            with self.db.begin() as conn:
                found = conn.execute(
                    sa.select(reservations)
                    .where(reservations.c.idempotency_key == key)
                    .with_for_update()
                ).one_or_none()
                existing = None if found is None else _reservation(found)
                if existing is not None and existing.status == "settled":
                    return existing
                taken_over = existing is not None and existing.status == "reserved"
                if existing is not None and taken_over:
                    periods = {c: wanted.get(c, self._limit_of(c)) for c in existing.periods}
                    adding = amount - existing.reserved_usd
                else:
                    periods, adding = wanted, amount
                states = self._lock(conn, periods, now)
                for charge in sorted(periods):
                    state = _following(states[charge], wanted.get(charge))
                    if adding > 0 and state.refuses(adding):
                        raise refusal(op_id, state, adding)
                    self._write_period(conn, state, reserved=state.reserved_usd + adding, now=now)
                row = {
                    "run_id": run_id,
                    "workflow_id": workflow_id,
                    "op_id": op_id,
                    "reserved_usd": amount,
                    "status": "reserved",
                    "cost_usd": None,
                    "settled_at": None,
                }
                if existing is None:
                    reservation_id = f"res_{uuid.uuid4().hex[:20]}"
                    conn.execute(
                        reservations.insert().values(
                            id=reservation_id,
                            app=self.app,
                            idempotency_key=key,
                            periods=[list(charge) for charge in sorted(periods)],
                            created_at=now,
                            **row,
                        )
                    )
                    created = now
                else:
                    reservation_id = existing.id
                    created = existing.created_at if taken_over else now
                    conn.execute(
                        reservations.update()
                        .where(reservations.c.id == reservation_id)
                        .values(
                            periods=[list(charge) for charge in sorted(periods)],
                            created_at=created,
                            **row,
                        )
                    )
                return Reservation(
                    id=reservation_id,
                    idempotency_key=key,
                    run_id=run_id,
                    workflow_id=workflow_id,
                    op_id=op_id,
                    periods=tuple(sorted(periods)),
                    reserved_usd=amount,
                    status="reserved",
                    cost_usd=None,
                    created_at=created,
                )

        try:
            return self.db.retrying(f"reserve {key}", write)
        except sa.exc.IntegrityError:
            # Another process reserved for the same key between our read and our insert.
            return self.db.retrying(f"reserve {key}", write)

    def settle(self, reservation: Reservation, cost: Decimal, *, record: Recorder | None) -> bool:
        """The call cost `cost`: in one transaction, `record` writes its ledger row (on the same
        connection) and the reservation settles, its periods' `spent` up by `cost` and their
        `reserved` down by what it reserved. Idempotent: a reservation already settled changes
        nothing again. Returns what `record` returned; when it returns False (the ledger key
        belongs to another call) the reservation is released instead."""
        return self._close(reservation, money(cost), record)

    def release(self, reservation: Reservation, *, record: Recorder | None = None) -> bool:
        """The call failed: its reservation comes off its periods' `reserved`, and `record`
        writes its ledger row in the same transaction. Returns what `record` returned."""
        return self._close(reservation, None, record)

    def release_orphan(self, reservation: Reservation) -> bool:
        """Release a reservation the reconciler found orphaned, if it is still `reserved` by the
        same attempt (a call re-entered meanwhile has taken it over). True if released."""
        now = self.clock.now()

        def write() -> bool:
            with self.db.begin() as conn:
                row = self._locked_reservation(conn, reservation.id)
                if row.status != "reserved" or row.workflow_id != reservation.workflow_id:
                    return False
                self._unreserve(conn, row, spent=None, now=now)
                return True

        return self.db.retrying(f"release {reservation.id}", write)

    def _close(
        self, reservation: Reservation, cost: Decimal | None, record: Recorder | None
    ) -> bool:
        now = self.clock.now()

        def write() -> bool:
            with self.db.begin() as conn:
                row = self._locked_reservation(conn, reservation.id)
                # The ledger row first, before the hot period rows are locked: they are held
                # only for the two updates below.
                recorded = True if record is None else record(conn)
                if row.status == "settled":
                    return recorded
                spent = cost if recorded else None
                if spent is not None and spent > row.reserved_usd:
                    log.warning(
                        "%s (key %s) cost %s, more than the %s it reserved",
                        row.op_id,
                        row.idempotency_key,
                        usd(spent),
                        usd(row.reserved_usd),
                    )
                self._unreserve(conn, row, spent=spent, now=now)
                return recorded

        return self.db.retrying(f"settle {reservation.id}", write)

    def _locked_reservation(self, conn: sa.Connection, reservation_id: str) -> Reservation:
        found = conn.execute(
            sa.select(reservations).where(reservations.c.id == reservation_id).with_for_update()
        ).one_or_none()
        if found is None:
            raise RemitError(f"no reservation {reservation_id} in app {self.app}")
        return _reservation(found)

    def _unreserve(
        self, conn: sa.Connection, row: Reservation, *, spent: Decimal | None, now: datetime
    ) -> None:
        """Take `row` off its periods' `reserved` (unless it was released already) and, when
        `spent` is given, add it to their `spent` and settle the row; else release it."""
        held = row.reserved_usd if row.status == "reserved" else Decimal(0)
        if spent is None and held == 0:
            return
        states = self._lock(conn, {c: self._limit_of(c) for c in row.periods}, now)
        for charge in row.periods:
            state = states[charge]
            self._write_period(
                conn,
                state,
                reserved=state.reserved_usd - held,
                spent=None if spent is None else state.spent_usd + spent,
                now=now,
            )
        values: dict[str, Any] = (
            {"status": "released"}
            if spent is None
            else {"status": "settled", "cost_usd": spent, "settled_at": now}
        )
        conn.execute(reservations.update().where(reservations.c.id == row.id).values(**values))

    def _limit_of(self, charge: Charge) -> Decimal:
        """The declared limit of a period's budget (0 if the app no longer declares it)."""
        scope, period = charge
        kind = period_bounds(period)[0]
        for budget in self.declared:
            if budget.scope == scope and budget.period == kind:
                return budget.limit_usd
        return Decimal(0)

    def _lock(
        self, conn: sa.Connection, wanted: Mapping[Charge, Decimal], now: datetime
    ) -> dict[Charge, PeriodState]:
        """The rows of the `wanted` periods, locked till commit in (scope, period) order, each
        made on first use with its limit. (On SQLite `Database.begin` holds the write lock.)"""
        states = self._select(conn, sorted(wanted), lock=True)
        missing = [charge for charge in sorted(wanted) if charge not in states]
        if missing:
            insert = self.db.insert
            conn.execute(
                insert(budget_periods)
                .values(
                    [
                        {
                            "app": self.app,
                            "scope": scope,
                            "period": period,
                            "limit_usd": wanted[scope, period],
                            "spent_usd": Decimal(0),
                            "reserved_usd": Decimal(0),
                            "updated_at": now,
                        }
                        for scope, period in missing
                    ]
                )
                .on_conflict_do_nothing(index_elements=["app", "scope", "period"])
            )
            states = self._select(conn, sorted(wanted), lock=True)
        return states

    def _select(
        self, conn: sa.Connection, charges: Sequence[Charge], *, lock: bool = False
    ) -> dict[Charge, PeriodState]:
        if not charges:
            return {}
        query = (
            sa.select(budget_periods)
            .where(
                budget_periods.c.app == self.app,
                sa.or_(
                    *(
                        sa.and_(budget_periods.c.scope == scope, budget_periods.c.period == period)
                        for scope, period in charges
                    )
                ),
            )
            .order_by(budget_periods.c.scope, budget_periods.c.period)
        )
        rows = conn.execute(query.with_for_update() if lock else query)
        return {(row.scope, row.period): _state(row) for row in rows}

    def _write_period(
        self,
        conn: sa.Connection,
        state: PeriodState,
        *,
        reserved: Decimal,
        now: datetime,
        spent: Decimal | None = None,
    ) -> None:
        # Absolute values computed in Decimal under the row's lock, not `x = x + :d`: SQLite
        # would add them as floating point.
        values: dict[str, Any] = {
            "reserved_usd": max(reserved, Decimal(0)),
            "limit_usd": state.limit_usd,
            "updated_at": now,
        }
        if spent is not None:
            values["spent_usd"] = spent
        conn.execute(
            budget_periods.update()
            .where(
                budget_periods.c.app == self.app,
                budget_periods.c.scope == state.scope,
                budget_periods.c.period == state.period,
            )
            .values(**values)
        )

    def raise_limit(
        self, scope: str, period: str | None, limit: Decimal | int | str, *, by: str
    ) -> PeriodState:
        """Set the limit of `scope`'s period `period` (None: the current one) to `limit`, and
        record who did in the audit log. The limit stays for that period whatever the app
        declares; later periods start at the declared limit again. Raises `RemitError` for a
        scope the app declares no budget for, or a period of another kind than its budget's."""
        now = self.clock.now()
        budget, key = self._declared(scope, period, now)
        try:
            new_limit = money(Decimal(str(limit)))
        except InvalidOperation:
            raise RemitError(f"limit {limit!r} is not an amount in USD, e.g. 75 or 75.50") from None
        if not new_limit.is_finite() or new_limit < 0:
            raise RemitError(f"limit {limit!r} must be 0 or more USD")
        if not by:
            raise RemitError("say who sets the limit (by=...)")

        def write() -> PeriodState:
            with self.db.begin() as conn:
                state = self._lock(conn, {(scope, key): budget.limit_usd}, now)[scope, key]
                conn.execute(
                    budget_periods.update()
                    .where(
                        budget_periods.c.app == self.app,
                        budget_periods.c.scope == scope,
                        budget_periods.c.period == key,
                    )
                    .values(limit_usd=new_limit, limit_set_by=by, updated_at=now)
                )
                audit_row(
                    conn,
                    at=now,
                    actor=by,
                    action="budget.set_limit",
                    target=f"budget:{self.app}:{scope}:{key}",
                    meta={"from": str(state.limit_usd), "to": str(new_limit)},
                )
                return PeriodState(
                    scope,
                    key,
                    new_limit,
                    state.spent_usd,
                    state.reserved_usd,
                    now,
                    by,
                )

        return self.db.retrying(f"set limit {scope} {key}", write)

    def _declared(self, scope: str, period: str | None, now: datetime) -> tuple[Budget, str]:
        """The declared budget for `scope` whose kind `period` is (or the only one, when
        `period` is None), and the period's key."""
        mine = [budget for budget in self.declared if budget.scope == scope]
        if not mine:
            declared = ", ".join(sorted({b.scope for b in self.declared})) or "none"
            raise RemitError(
                f"app `{self.app}` declares no budget for scope `{scope}` (it has: {declared}): "
                "add Budget(...) to App(budgets=[...]), or give a scope it has"
            )
        if period is None:
            if len(mine) > 1:
                kinds = ", ".join(budget.period for budget in mine)
                raise RemitError(
                    f"scope `{scope}` has a budget per {kinds}: say which period with --period "
                    f"(e.g. {period_key(mine[0].period, now)})"
                )
            return mine[0], period_key(mine[0].period, now)
        try:
            kind, _, _ = period_bounds(period)
        except ValueError as error:
            raise RemitError(str(error)) from None
        for budget in mine:
            if budget.period == kind:
                return budget, period
        raise RemitError(
            f"scope `{scope}` has no {ADJECTIVES[kind]} budget: its periods are "
            + ", ".join(f"{b.period} (e.g. {period_key(b.period, now)})" for b in mine)
        )

    def periods(self, *, limit: int = 100) -> list[PeriodState]:
        """The app's periods, newest first, with the current period of each declared budget
        even before its first call."""
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(budget_periods)
                .where(budget_periods.c.app == self.app)
                .order_by(budget_periods.c.updated_at.desc())
                .limit(limit)
            )
            found = {(row.scope, row.period): _state(row) for row in rows}
        for budget in self.declared:
            charge = (budget.scope, period_key(budget.period, now))
            if charge not in found:
                found[charge] = PeriodState(*charge, budget.limit_usd, Decimal(0), Decimal(0))
        return sorted(
            found.values(), key=lambda s: (-period_bounds(s.period)[1].timestamp(), s.scope)
        )

    def drift(self, states: Sequence[PeriodState] | None = None) -> list[Drift]:
        """Each period's counter against the sum of the ledger costs of the calls settled in it
        (the ledger row under each settled reservation's key), for `states` (default: the
        periods that can still change, the current ones and any with calls in flight). Reads
        only; a drift is reported, never corrected."""
        if states is None:
            states = self.live_periods()
        if not states:
            return []
        since = min(period_bounds(state.period)[1] for state in states)
        query = _LEDGER_SUMS_SQLITE if self.db.is_sqlite else _LEDGER_SUMS_POSTGRES
        with self.db.engine.connect() as conn:
            sums = {
                (row.scope, row.period): row.ledger_usd or Decimal(0)
                for row in conn.execute(query, {"app": self.app, "since": since})
            }
        return [
            Drift(
                state.scope,
                state.period,
                state.spent_usd,
                sums.get((state.scope, state.period), Decimal(0)),
            )
            for state in states
        ]

    def live_periods(self) -> list[PeriodState]:
        """The periods whose counters can still move: the current period of each declared
        budget, and any period with calls in flight."""
        now = self.clock.now()
        current = {(b.scope, period_key(b.period, now)) for b in self.declared}
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(budget_periods).where(
                    budget_periods.c.app == self.app,
                    sa.or_(
                        budget_periods.c.reserved_usd != 0,
                        *(
                            sa.and_(budget_periods.c.scope == s, budget_periods.c.period == p)
                            for s, p in current
                        ),
                    ),
                )
            )
            return [_state(row) for row in rows]

    def open_reservations(self) -> list[tuple[Reservation, tuple[str, str] | None]]:
        """Every reservation still `reserved`, with its run's (current workflow id, status);
        None for a direct call, which has no run."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    reservations,
                    runs.c.workflow_id.label("run_workflow_id"),
                    runs.c.status.label("run_status"),
                )
                .select_from(reservations.outerjoin(runs, runs.c.run_id == reservations.c.run_id))
                .where(reservations.c.app == self.app, reservations.c.status == "reserved")
                .order_by(reservations.c.created_at)
            )
            return [
                (
                    _reservation(row),
                    None if row.run_status is None else (row.run_workflow_id, row.run_status),
                )
                for row in rows
            ]

    def reservation(self, key: str) -> Reservation | None:
        """The reservation of the call keyed `key`, if it made one."""
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(reservations).where(reservations.c.idempotency_key == key)
            ).one_or_none()
        return None if row is None else _reservation(row)


def _following(state: PeriodState, declared: Decimal | None) -> PeriodState:
    """`state` with the declared limit, unless someone set its limit by hand."""
    if declared is None or state.limit_set_by is not None or state.limit_usd == declared:
        return state
    return PeriodState(
        state.scope, state.period, declared, state.spent_usd, state.reserved_usd, state.updated_at
    )


def _state(row: sa.Row[Any]) -> PeriodState:
    return PeriodState(
        scope=row.scope,
        period=row.period,
        limit_usd=money(row.limit_usd),
        spent_usd=money(row.spent_usd),
        reserved_usd=money(row.reserved_usd),
        updated_at=row.updated_at,
        limit_set_by=row.limit_set_by,
    )


def _reservation(row: sa.Row[Any]) -> Reservation:
    return Reservation(
        id=row.id,
        idempotency_key=row.idempotency_key,
        run_id=row.run_id,
        workflow_id=row.workflow_id,
        op_id=row.op_id,
        periods=tuple((scope, period) for scope, period in row.periods),
        reserved_usd=money(row.reserved_usd),
        status=row.status,
        cost_usd=None if row.cost_usd is None else money(row.cost_usd),
        created_at=row.created_at,
    )


# The ledger's side of the drift check: per budget period, the sum of the ledger costs of the
# calls settled in it since `since`. A settled reservation and its call's ledger row share the
# idempotency key (one reservation per call); the reservation's `periods` JSON says which
# periods the call counts against. The same query in each database's JSON dialect.
_LEDGER_SUMS_SQLITE = (
    sa.text(
        """
        SELECT json_extract(charge.value, '$[0]') AS scope,
               json_extract(charge.value, '$[1]') AS period,
               SUM(l.cost) AS ledger_usd
        FROM remit_reservations AS r
        JOIN remit_ledger AS l ON l.idempotency_key = r.idempotency_key
        JOIN json_each(r.periods) AS charge
        WHERE r.app = :app AND r.status = 'settled' AND r.created_at >= :since
        GROUP BY 1, 2
        """
    )
    .bindparams(sa.bindparam("since", type_=UTCDateTime()))
    .columns(scope=sa.String, period=sa.String, ledger_usd=sa.Numeric(18, 6))
)
_LEDGER_SUMS_POSTGRES = (
    sa.text(
        """
        SELECT charge.value ->> 0 AS scope,
               charge.value ->> 1 AS period,
               SUM(l.cost) AS ledger_usd
        FROM remit_reservations AS r
        JOIN remit_ledger AS l ON l.idempotency_key = r.idempotency_key
        CROSS JOIN LATERAL json_array_elements(r.periods) AS charge(value)
        WHERE r.app = :app AND r.status = 'settled' AND r.created_at >= :since
        GROUP BY 1, 2
        """
    )
    .bindparams(sa.bindparam("since", type_=UTCDateTime()))
    .columns(scope=sa.String, period=sa.String, ledger_usd=sa.Numeric(18, 6))
)
