"""What every `remit` command shares: the Typer app, the consoles, and loading the app and a
client on it.

The command modules import only light things at their top (Typer, Rich, the standard library,
`remit._version`), so that `remit --help` and `remit --version` load neither DBOS, SQLAlchemy
nor OpenTelemetry. A command imports what it works with when it runs, and reads or acts on the
app through `client_of`, which opens the database (and a DBOS client only if a verb needs one).

Unlike the rest of remit, these modules do not use `from __future__ import annotations`: Typer
reads every command's annotations to build `--help`, and evaluating them from strings, twice
per parameter, took a third of its time. Names imported only for type checking are quoted.
"""

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from remit._version import __version__

if TYPE_CHECKING:
    from rich.table import Table

    from remit.app import App
    from remit.client import Client
    from remit.core.settings import Settings

cli = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="remit: durable workflows for a business's operations.",
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, `make demo` in a pipe) gets a readable width instead of 80 columns.
_WIDTH = None if sys.stdout.isatty() else 150
out = Console(highlight=False, width=_WIDTH)
err = Console(stderr=True, highlight=False, width=_WIDTH)


class _State:
    app_path: Path = Path(".")


_state = _State()


def _print_version(given: bool) -> None:
    if given:
        out.print(f"remit {__version__}")
        raise typer.Exit()


@cli.callback()
def _main(
    app: Annotated[Path, typer.Option("--app", help="The app's folder.", show_default=True)] = Path(
        "."
    ),
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print remit's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    _state.app_path = app


# `--app` is taken before the command (`remit --app X runs`) or after it (`remit runs --app X`).
AppDir = Annotated[
    Path | None, typer.Option("--app", help="The app's folder (default: the current folder).")
]


def load(app_dir: Path | None) -> tuple["App", "Settings"]:
    """The app in `app_dir` (else the folder `remit --app` named) and its settings from the
    environment, with this process's logging set up as they say."""
    from remit.app import load_app
    from remit.core import telemetry
    from remit.core.settings import Settings

    folder = app_dir or _state.app_path
    app = load_app(folder)
    settings = Settings.from_env(folder)
    telemetry.configure_logging(settings)
    return app, settings


@contextlib.contextmanager
def client_of(app_dir: Path | None, *, pool_size: int = 4) -> Iterator["Client"]:
    """A `remit.Client` on the app in `app_dir` (its settings from the environment), closed on
    leaving: what every command that reads or acts on the app's database goes through.
    `pool_size`: the database connections it keeps (a server answering at once needs more)."""
    from remit.client import Client

    app, settings = load(app_dir)
    with Client(app, settings, pool_size=pool_size) as client:
        yield client


def run_id_of(remit: "Client", given: str) -> str:
    """The whole id of the run `given` names, in full or by an unambiguous prefix."""
    from remit.core.ids import full_id
    from remit.core.schema import runs

    return full_id(remit.db, runs.c.run_id, given, what="run")


def whole_ids(table: "Table", *columns: int) -> "Table":
    """Keep the id columns of `table` whole, however narrow the terminal: an id cut short
    cannot be typed back (other columns wrap instead)."""
    for index in columns:
        column = table.columns[index]
        column.no_wrap = True
        column.min_width = max((len(str(cell)) for cell in column.cells), default=0)
    return table


def parse_json(raw: str, what: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        from remit.core.errors import RemitError

        raise RemitError(
            f"{what} is not valid JSON ({error.msg} at column {error.colno}): {raw!r}"
        ) from None
