"""Where a `ctx` takes its positions: each operation of a run takes the next one (DBOS's step
id), checked against the run's journal before its step runs. A live attempt takes them from
DBOS (`LiveSteps`); `remit deploy check`'s replay from the record (`ops/deploy.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from remit.core.errors import RemitError
from remit.execution.journal import Journal, Mark, sleep_mark

if TYPE_CHECKING:
    from dbos import StepOptions, StepReservation


class Slot(Protocol):
    """One position of the run, taken by the operation about to run there."""

    @property
    def position(self) -> int: ...

    def run(self, mark: Mark, options: StepOptions, body: Callable[[], Any]) -> Any:
        """Run `body` as the step at this position, once `mark` is checked against it."""
        ...

    async def run_async(self, mark: Mark, options: StepOptions, body: Callable[[], Any]) -> Any:
        """`run`, awaited."""
        ...


class Steps(Protocol):
    """Where a `ctx` takes its positions: DBOS in a live attempt, the record in a replay."""

    journal: Journal

    def reserve(self) -> Slot: ...

    def patch(self, name: str) -> bool: ...

    async def patch_async(self, name: str) -> bool: ...

    def short_sleep(self, seconds: float) -> None: ...

    async def short_sleep_async(self, seconds: float) -> None: ...


class _LiveSlot:
    def __init__(self, reservation: StepReservation, journal: Journal) -> None:
        self._reservation = reservation
        self._journal = journal

    @property
    def position(self) -> int:
        return self._reservation.step_id

    def run(self, mark: Mark, options: StepOptions, body: Callable[[], Any]) -> Any:
        self._journal.check(self.position, mark)
        return self._reservation.run(options, body)

    async def run_async(self, mark: Mark, options: StepOptions, body: Callable[[], Any]) -> Any:
        self._journal.check(self.position, mark)
        return await self._reservation.run_async(options, body)


class LiveSteps:
    """A live attempt's positions: DBOS's step ids, each checked against the run's journal
    before its step runs. The position is reserved on the calling thread (or the event loop,
    before any await), so concurrent operations of an async run take theirs in program order."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def reserve(self) -> Slot:
        from dbos import DBOS

        return _LiveSlot(DBOS.reserve_step(), self.journal)

    def patch(self, name: str) -> bool:
        from dbos import DBOS

        position = _next_position()
        if self.journal.patch_taken(position, name) is False:
            return False
        taken = DBOS.patch(name)
        if taken:
            self.journal.passed(position)
        return taken

    async def patch_async(self, name: str) -> bool:
        from dbos import DBOS

        position = _next_position()
        if self.journal.patch_taken(position, name) is False:
            return False
        taken = await DBOS.patch_async(name)
        if taken:
            self.journal.passed(position)
        return taken

    def short_sleep(self, seconds: float) -> None:
        from dbos import DBOS

        if seconds > 0:
            self.journal.check(_next_position(), sleep_mark(short=True))
        DBOS.sleep(seconds)

    async def short_sleep_async(self, seconds: float) -> None:
        from dbos import DBOS

        if seconds > 0:
            self.journal.check(_next_position(), sleep_mark(short=True))
        await DBOS.sleep_async(seconds)


def _next_position() -> int:
    """The position the next operation of this workflow takes. DBOS has no call that tells it
    without taking it (a reservation does), and `ctx.patch` must look before it takes: this
    reads DBOS's workflow context, as `DBOS.patch` does."""
    from dbos._context import get_local_dbos_context

    context = get_local_dbos_context()
    if context is None or not context.is_workflow():
        raise RemitError("ctx is used only inside the workflow it was given to")
    return context.function_id + 1
