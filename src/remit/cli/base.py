"""What every `remit` command shares: the Typer app, the consoles, and loading the app and its
database."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from dbos import DBOSClient
from rich.console import Console
from rich.table import Table

from remit._version import __version__
from remit.app import App, load_app
from remit.core import telemetry
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.settings import Settings

if TYPE_CHECKING:
    from remit.client import Client

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


def load(app_dir: Path | None) -> tuple[App, Settings]:
    folder = app_dir or _state.app_path
    app = load_app(folder)
    settings = Settings.from_env(folder)
    telemetry.configure_logging(settings)
    return app, settings


@contextlib.contextmanager
def connected(app_dir: Path | None) -> Iterator[tuple[App, Settings, Database, DBOSClient]]:
    """The app, its settings, its prepared database and a DBOS client, closed on leaving."""
    app, settings = load(app_dir)
    db = open_database(settings)
    client = db.client(app.name)
    try:
        yield app, settings, db, client
    finally:
        client.destroy()
        db.dispose()


@contextlib.contextmanager
def client_of(app_dir: Path | None) -> Iterator[Client]:
    """A `remit.Client` on the app in `app_dir` (its settings from the environment), closed on
    leaving: what a command that acts on the app acts through."""
    from remit.client import Client

    app, settings = load(app_dir)
    with Client(app, settings) as client:
        yield client


def open_database(settings: Settings) -> Database:
    db = Database(settings.database_url, pool_size=2)
    db.prepare()
    return db


def whole_ids(table: Table, *columns: int) -> Table:
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
        raise RemitError(
            f"{what} is not valid JSON ({error.msg} at column {error.colno}): {raw!r}"
        ) from None
