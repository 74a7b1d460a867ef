"""What a client's rooms share: who acts, what follows a write, and the checks every verb makes.

`remit.Client` is a small root with one room per thing it acts on (`client.runs`,
`client.approvals`, `client.budgets`, ...). Each room lives in the package of its feature and
holds the client as an `Acting`: the room asks it who acts (`by=`, else the client's own) and
tells it after a write that gives a worker something to do. What else a room reads of the
client (its services, its app) the room's module declares as a protocol of its own, so that
no lower layer names the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from remit.core import limits
from remit.core.errors import RemitError

if TYPE_CHECKING:
    from remit.core.clock import Clock
    from remit.core.database import Database
    from remit.core.settings import Settings


class Acting(Protocol):
    """The client as every room sees it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def db(self) -> Database: ...

    @property
    def app_name(self) -> str: ...

    def who(self, by: str | None) -> str:
        """Who acts: `by`, else (when None) the client's own. An empty `by` is no one, refused
        by the services' own checks."""
        ...

    def person(self, by: str | None) -> str:
        """Who acts, for an act only people and agents take: remit's own principals are
        refused (the policies do not check them)."""
        ...

    def written(self) -> None:
        """Called after each write that gives a worker something to do (see `Client.on_write`)."""
        ...


def no_nul(verb: str, **given: str | None) -> None:
    """Refuse a NUL character in the text arguments of `verb`, which no text remit keeps holds
    (and Postgres could not look up): `InputInvalid` naming the argument."""
    limits.check_json(
        {name: value for name, value in given.items() if value is not None},
        what=f"the arguments of {verb}",
        cap="input_bytes",
        target=verb,
    )


def not_in_a_workflow(verb: str) -> None:
    """Refuse a client verb made inside a workflow, where it would be made again on every
    replay."""
    from dbos import DBOS

    if DBOS.workflow_id is not None:
        raise RemitError(
            f"Client.{verb} was called inside a workflow (run attempt {DBOS.workflow_id}): a run "
            "acts through its `ctx` (ctx.call, ctx.approval, ...), whose steps are checkpointed; "
            "a client call there would be made again on every replay"
        )
