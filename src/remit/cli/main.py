"""`remit`: the command line. Every command takes `--app PATH` (default: the current folder)."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import sys
from typing import TYPE_CHECKING, NoReturn

from rich.markup import escape

from remit.cli import (  # noqa: F401
    activity,
    approvals,
    apps,
    budgets,
    changes,
    chat,
    credentials,
    demo,
    deploy,
    direct,
    init,
    messages,
    ops,
    processes,
    resources,
    runs,
    scenarios,
    schedules,
    signin,
    telegram,
    tokens,
    try_,
    wakeup,
    wakeup_connect,
    wakeup_service,
)
from remit.cli.base import (
    NOT_WOKEN,
    click_command,
    err,
    near,
)

# Imported for what they do on import: register their commands on `cli`.
from remit.core.text import printable

if TYPE_CHECKING:
    pass


def main() -> None:
    """The `remit` command."""
    try:
        click_command()()
    except SystemExit as done:
        if done.code in (0, None) and NOT_WOKEN:
            _fail(NOT_WOKEN[-1])
        raise
    except Exception as error:
        message = _refusal(error)
        if message is None:
            raise
        _fail(message)


def _fail(message: str) -> NoReturn:
    # One line, however long: a script greps it, a terminal wraps it. No `:name:` in it is an
    # emoji code (`type:id: ...` stays text).
    err.print(f"[red]error:[/] {escape(printable(message))}", soft_wrap=True, emoji=False)
    sys.exit(1)


def _refusal(error: Exception) -> str | None:
    """What to tell a user whose command was refused: a `RemitError`'s message, or what the
    database refused to store (a value it has no type for). None for anything else, a
    defect, which is raised with its traceback."""
    # Imported only when something went wrong: `remit --help` does without them.
    from remit.core.errors import RemitError

    if isinstance(error, RemitError):
        return str(error)
    refused = [
        getattr(sys.modules.get(name), "DataError", None) for name in ("sqlalchemy.exc", "psycopg")
    ]
    if any(isinstance(error, kind) for kind in refused if isinstance(kind, type)):
        cause = getattr(error, "orig", None) or error
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return (
            f"the database refused a value it cannot store ({near(first)}): change that "
            "value and try again"
        )
    return None
