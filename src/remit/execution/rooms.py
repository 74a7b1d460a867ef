"""`client.calls`: an op called directly (not from a run), a data collection's verbs, and the
ledger of every op call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from remit.core import limits
from remit.core.acting import Acting, no_nul, not_in_a_workflow

if TYPE_CHECKING:
    import sqlalchemy as sa

    from remit.core.ledger import LedgerRow
    from remit.execution.direct import CallResult, DirectCalls


class CallServices(Protocol):
    """The client's services this room uses."""

    @property
    def direct(self) -> DirectCalls: ...


class CallsClient(Acting, Protocol):
    """The client as this room sees it."""

    @property
    def services(self) -> CallServices: ...


class CallsRoom:
    """`client.calls`: ops called from outside a run, under the policies."""

    def __init__(self, client: CallsClient) -> None:
        self._client = client

    def call(
        self,
        op_id: str,
        input: Mapping[str, Any],
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> CallResult:
        """Call an op directly, under the policies (a policy may hold it for an approval)."""
        not_in_a_workflow("calls.call")
        called = self._client.services.direct.call(op_id, input, by=self._client.who(by), key=key)
        if called.status == "held":
            self._client.written()
        return called

    def data(
        self, collection: str, verb: str, input: Mapping[str, Any], *, by: str | None = None
    ) -> CallResult:
        """A collection's `get`, `put`, `list` or `delete`: the op `data.<collection>.<verb>`."""
        return self.call(f"data.{collection}.{verb}", input, by=by)

    def ledger(
        self,
        run_id: str | None = None,
        *,
        op: str | None = None,
        status: str | None = None,
        limit: int = 200,
        only: sa.ColumnElement[bool] | None = None,
    ) -> list[LedgerRow]:
        """Op calls: one run's in order, or the latest; of one op (`op`, its id) and of one
        status (`ok`, `failed`, `uncertain`, ...) when given. Each with its earlier tries
        (`LedgerRow.earlier`): the refusals before it was tried again, and what an earlier
        attempt left before it was made again."""
        from remit.core.ledger import LedgerStore

        limits.check_limit(limit, where="calls.ledger")
        no_nul("calls.ledger", run_id=run_id, op=op, status=status)
        return LedgerStore(self._client.db, clock=self._client.clock).list(
            run_id=run_id, op_id=op, status=status, limit=limit, with_tries=True, only=only
        )
