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
import copy
import json
import logging
import os
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer
import typer.core
import typer.main
import typer.models
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

# Typer carries its own copy of Click: a group's help is formatted with that copy's types.
from typer import _click

from remit._version import __version__
from remit.core.text import printable

if TYPE_CHECKING:
    from datetime import datetime

    from remit.app import App
    from remit.client import Client
    from remit.core.settings import Settings
    from remit.surface import Surface


class HelpGroup(typer.core.TyperGroup):
    """A command group whose help is plain text: its commands under the headings of `sections`,
    each with its first sentence in full. Typer's Rich help would import Rich's Markdown and
    syntax highlighting, which took longer than all the rest of `remit --help`."""

    # Headings and the commands under each, in order; the rest go under "Commands".
    sections: ClassVar[dict[str, list[str]]] = {}

    def list_commands(self, ctx: _click.Context) -> list[str]:
        # Their names only: looking at each (as Typer's does) would build every command.
        return list(self.commands)

    def format_commands(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        found = {
            name: command
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        }
        placed = {name for names in self.sections.values() for name in names}
        listed = {title: [n for n in names if n in found] for title, names in self.sections.items()}
        listed["Other commands" if self.sections else "Commands"] = [
            name for name in found if name not in placed
        ]
        for title, names in listed.items():
            if names:
                with formatter.section(title):
                    formatter.write_dl([(n, found[n].get_short_help_str(limit=500)) for n in names])


class _RemitGroup(HelpGroup):
    sections: ClassVar[dict[str, list[str]]] = {
        "Runs": ["start", "run", "runs", "show", "send", "state", "cancel", "retry"],
        "People": ["approvals", "approve", "reject", "tasks", "task", "activity", "chat", "chats"],
        "Ops, data and money": ["call", "data", "ledger", "budgets", "secrets"],
        "Policies and access": ["policies", "denials", "tokens", "login-link", "passwords"],
        "Resources": ["plan", "apply", "drift", "import", "resources"],
        "Changes": ["change", "changes", "deploys"],
        "Running the app": [
            "init",
            "apps",
            "worker",
            "serve",
            "workers",
            "pause",
            "resume",
            "reconcile",
            "deadlines",
            "schedules",
            "deploy",
            "test",
            "try",
            "telegram",
            "wakeup",
            "demo",
            "fakes",
        ],
    }


def command_group(help: str, *, cls: type[HelpGroup] = HelpGroup, **settings: Any) -> typer.Typer:
    """A `remit` command group (the top one, or one like `remit budgets`) with plain help."""
    return typer.Typer(
        cls=cls,
        help=help,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        **settings,
    )


cli = command_group(
    "remit: durable workflows for a business's operations.", cls=_RemitGroup, no_args_is_help=True
)


class _Commands(MutableMapping[str, _click.Command]):
    """The commands and command groups registered on a Typer app, by name, in the order they
    were registered, each built (its Click command, with its options read from its annotations)
    as Typer builds it, but only when it is first looked up. Typer builds all of them before
    it parses the command line, which was a tenth of `remit runs`; `remit --help` still builds
    every one, to list them."""

    def __init__(self, app: typer.Typer) -> None:
        self._app = app
        self._entries: dict[
            str, _click.Command | typer.models.CommandInfo | typer.models.TyperInfo
        ] = {}
        for command in app.registered_commands:
            assert command.callback is not None
            name = command.name or typer.main.get_command_name(command.callback.__name__)
            self._entries[name] = command
        for group in app.registered_groups:
            if isinstance(group.name, str):
                self._entries[group.name] = group
            else:  # named by its own Typer, not where it was added: built to read its name
                built = self._build(group)
                assert built.name, "every command group of `remit` has a name"
                self._entries[built.name] = built

    def _build(self, info: typer.models.CommandInfo | typer.models.TyperInfo) -> _click.Command:
        app = self._app
        if isinstance(info, typer.models.CommandInfo):
            return typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
        return typer.main.get_group_from_info(
            info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
            suggest_commands=app.suggest_commands,
        )

    def __getitem__(self, name: str) -> _click.Command:
        entry = self._entries[name]
        if not isinstance(entry, _click.Command):
            entry = self._entries[name] = self._build(entry)
        return entry

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._entries[name] = command

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def click_command() -> _click.Command:
    """`remit` as Click runs it: the group `cli()` would build, with its options, but with
    each of its commands built only when the command line names it (see `_Commands`)."""
    bare = copy.copy(cli)
    bare.registered_commands, bare.registered_groups = [], []
    group = typer.main.get_command(bare)
    assert isinstance(group, typer.core.TyperGroup)
    group.commands = _Commands(cli)
    return group


# Piped output (CI logs, `make demo` in a pipe) gets a readable width instead of 80 columns.
_WIDTH = None if sys.stdout.isatty() else 150
out = Console(highlight=False, width=_WIDTH)
err = Console(stderr=True, highlight=False, width=_WIDTH)


class _State:
    app_path: Path = Path(".")
    url: str | None = None
    token: str | None = None


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
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Act through this remit serve (default REMIT_URL) rather than on the database.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", help="The API token to act with there (default REMIT_TOKEN)."),
    ] = None,
) -> None:
    _state.app_path = app
    _state.url = url or os.environ.get("REMIT_URL") or None
    _state.token = token or os.environ.get("REMIT_TOKEN") or None


def _someone(given: str | None) -> str | None:
    """`--as` as given, refused when it is empty: acting as no one must not become acting as
    the default principal."""
    if given is not None and not given.strip():
        raise typer.BadParameter(
            "an empty principal is no one: give user:<name> or agent:<name>, or leave --as "
            "out to act as REMIT_AS (else user:<login>)"
        )
    return given


# Who acts on the command line, checked by the app's policies like anyone else. With direct
# access to the database this is trusted as given: database access is full trust.
ActAs = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Who acts: user:<name> or agent:<name> (default REMIT_AS, else user:<login>).",
        callback=_someone,
    ),
]


# `--json` on every listing: a JSON array of objects, one a row, each with the fields the HTTP
# API answers with for it (`print_json`); `[]` when there are none.
AsJson = Annotated[
    bool,
    typer.Option(
        "--json", help="Print them as a JSON array of objects, with the HTTP API's fields."
    ),
]


def ids_or_rows(quiet: bool, as_json: bool) -> None:
    """Refuse `--quiet` with `--json`: a listing prints its ids or its rows, not both."""
    if quiet and as_json:
        raise typer.BadParameter("give --quiet (only the ids) or --json (every field), not both")


# `--app` is taken before the command (`remit --app X runs`) or after it (`remit runs --app X`).
AppDir = Annotated[
    Path | None, typer.Option("--app", help="The app's folder (default: the current folder).")
]

# How a server takes TLS (`remit serve`, `remit wakeup serve`; see `serve/server.py`).
TlsCert = Annotated[
    Path | None, typer.Option("--tls-cert", help="Serve HTTPS with this certificate (PEM).")
]
TlsKey = Annotated[
    Path | None, typer.Option("--tls-key", help="The certificate's private key (PEM).")
]
BehindProxy = Annotated[
    bool,
    typer.Option(
        "--behind-proxy",
        help="Serve plain HTTP on an address other machines reach, because a proxy in "
        "front of it terminates TLS.",
    ),
]


def load(app_dir: Path | None, *, create_database: bool = False) -> tuple["App", "Settings"]:
    """The app in `app_dir` (else the folder `remit --app` named) and its settings from the
    environment, with this process's logging set up as they say. `create_database`: make the
    Postgres database the settings name when the server has none of that name (`remit
    worker` and `remit serve`, which a fresh deploy starts first)."""
    from remit.app import load_app

    folder, settings = _settings(app_dir)
    if create_database:
        _create_database(settings)
    return load_app(folder), settings


def _create_database(settings: "Settings") -> None:
    """Create the Postgres database `settings` name if it is missing, saying so on one line."""
    from remit.core.database import Database

    db = Database.of(settings, pool_size=1)
    try:
        if db.create_if_missing():
            err.print(f"created the database {db.url.database} at {db.shown_url} (it was missing)")
    finally:
        db.dispose()


def app_folder_of(app_dir: Path | None) -> Path:
    """The folder `--app` names (after the command or before it), else the current one."""
    return app_dir or _state.app_path


def _settings(app_dir: Path | None) -> tuple[Path, "Settings"]:
    """The app's folder and its settings from the environment, with logging set up."""
    from remit.core import telemetry
    from remit.core.settings import Settings

    folder = app_folder_of(app_dir)
    settings = Settings.from_env(folder)
    telemetry.configure_logging(settings)
    return folder, settings


@contextlib.contextmanager
def client_of(app_dir: Path | None) -> Iterator["Surface"]:
    """The client every command that reads or acts on an app goes through, closed on leaving:
    through `remit serve` as an API token's principal when `--url` (or `REMIT_URL`) is given,
    else a `remit.Client` on the app's database (see `local_client`)."""
    if _state.url is None:
        with local_client(app_dir) as client:
            yield client
        return
    from remit.core.errors import RemitError
    from remit.remote import RemoteClient

    if _state.token is None:
        raise RemitError(
            f"acting through {_state.url} needs an API token: pass --token or set REMIT_TOKEN "
            "(an admin makes one with `remit tokens create --for user:<name>`)"
        )
    _, settings = _settings(app_dir)
    with RemoteClient(_state.url, _state.token, settings=settings) as remote:
        yield remote


def folder_of(app_dir: Path | None) -> Path:
    """The app's folder: `app_dir`, else the one `remit --app` named (the current folder)."""
    return app_dir or _state.app_path


def remote_of() -> tuple[str | None, str | None]:
    """The server `--url` (REMIT_URL) names and the token `--token` (REMIT_TOKEN) gives."""
    return _state.url, _state.token


def here_only(command: str) -> None:
    """Refuse `command`, which works on the app's folder and its database, when `--url`
    (`REMIT_URL`) is given, rather than run it on a database the caller did not mean."""
    if _state.url is not None:
        from remit.core.errors import RemitError

        raise RemitError(
            f"`remit {command}` works on the app's folder and its database, not through "
            f"{_state.url}: run it where the app and REMIT_DATABASE_URL are, without REMIT_URL"
        )


# Why a write of this command found the app's worker stopped and could not wake it: once the
# command has done and printed what it did, `main` reports it as an error and exits 1.
NOT_WOKEN: list[str] = []


@contextlib.contextmanager
def local_client(
    app_dir: Path | None,
    *,
    pool_size: int = 4,
    command: str | None = None,
    serving: bool = False,
    create_database: bool = False,
) -> Iterator["Client"]:
    """A `remit.Client` on the app in `app_dir` (its settings from the environment), closed on
    leaving. The app's code is imported when a verb first needs it (listing runs does not).
    `pool_size`: the database connections it keeps (a server answering at once needs more).
    `command` names a command that works only on the app's folder and database: it is refused
    when `--url` (`REMIT_URL`) is given rather than run on a database the caller did not mean.
    A write that cannot wake the app's stopped worker fails the command once it has printed
    what it did (`NOT_WOKEN`), unless the command is `serving` others' writes, which log it.
    `create_database`: as `load` says."""
    from remit.client import Client

    if command is not None:
        here_only(command)
    folder, settings = _settings(app_dir)
    if create_database:
        _create_database(settings)
    with Client(folder, settings, pool_size=pool_size) as client:
        if not serving:
            client.on_write = lambda: client.ops.wake_if_stopped()
            client.on_not_woken = NOT_WOKEN.append
        yield client


def run_id_of(remit: "Surface", given: str) -> str:
    """The whole id of the run `given` names, in full or by an unambiguous prefix."""
    return remit.find_id("run", given)


class PlainTable(Table):
    """A table whose text cells show exactly what they hold: never read as Rich markup, with
    control characters escaped, so that a principal, a title or a reason someone typed cannot
    restyle the terminal or forge a row. A cell meant to be styled is a `Text` (see
    `styled`)."""

    def add_row(self, *cells: "RenderableType | None", **options: Any) -> None:
        super().add_row(
            *(Text(printable(cell)) if isinstance(cell, str) else cell for cell in cells),
            **options,
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        laid_out = self._side_by_side(console, options.max_width)
        if laid_out is None:
            yield from super().__rich_console__(console, options)
        else:
            yield from laid_out

    def _side_by_side(self, console: Console, max_width: int) -> list[Segment] | None:
        """The segments Rich renders this table as, when it is what a listing is: no box,
        title, caption or styles of its own, every cell one line of printable ASCII text (or
        empty), left-justified, and the columns' widths together within `max_width`, so that no
        cell wraps. Rich measures and renders each cell through its padding, wrapping and
        cropping, which for fifty rows took a tenth of `remit runs`; here each cell is padded
        to its column's width as Rich pads it, segment for segment, with the same styles
        (tests/unit/test_cli_tables.py holds the two equal). None otherwise: Rich lays it out.
        """
        columns = self.columns
        if (
            not columns
            or self.box is not None
            or self.title is not None
            or self.caption is not None
            or self.width is not None
            or self.min_width is not None
            or self.expand
            or not self.show_header
            or self.show_footer
            or self.padding != (0, 1, 0, 1)
            or not self.pad_edge
            or self.collapse_padding
            or self.row_styles
            or any(row.style is not None for row in self.rows)
        ):
            return None
        texts: list[list[Text]] = []
        widths: list[int] = []
        for column in columns:
            header = column.header
            if (
                column.justify != "left"
                or column.width is not None
                or column.max_width is not None
                or column.style
                or column.highlight
                # A header is read as Rich markup, with emoji codes: plain when it has neither.
                or not isinstance(header, str)
                or not _plain_ascii(header)
                or "[" in header
                or ":" in header
            ):
                return None
            cells = [Text(header)]
            for cell in column.cells:
                text = _plain_cell(cell)
                if text is None:
                    return None
                cells.append(text)
            width = max(len(cell.plain) for cell in cells)
            if column.min_width is not None:
                width = max(width, column.min_width)
            if width == 0:  # nothing in it: Rich's padding is all there is
                return None
            texts.append(cells)
            widths.append(width)
        if sum(widths) + 2 * len(widths) > max_width:
            return None
        get_style = console.get_style
        pad = get_style("none")
        blank = get_style("")
        new_line = Segment.line()
        laid_out: list[Segment] = []
        for row, in_row in enumerate(zip(*texts, strict=True)):
            for column, cell, width in zip(columns, in_row, widths, strict=True):
                # The header's style, over its cells' padding too; a row's cells have none.
                over = (
                    get_style(self.header_style or "") + get_style(column.header_style)
                    if row == 0
                    else None
                )
                padded = cell.plain + " " * (width - len(cell.plain))
                style = (
                    Style.combine((blank, get_style(cell.style, default=Style.null())))
                    if cell.style
                    else None
                )
                segments = [Segment(" ", pad), Segment(padded, style), Segment(" ", pad)]
                if over:
                    segments = [Segment(s.text, over + s.style) for s in segments]
                laid_out.extend(segments)
            laid_out.append(new_line)
        return laid_out


def _plain_cell(cell: "RenderableType") -> Text | None:
    """A cell as the `Text` Rich renders it as, if it is one line of plain text (see
    `_side_by_side`): text of its own, with no style over part of it, nor an alignment, an
    overflow or an end of its own. None for any other cell."""
    if cell == "":
        return Text("")
    if (
        type(cell) is Text
        and not cell.spans
        and cell.justify is None
        and cell.overflow is None
        and cell.end == "\n"
        and _plain_ascii(cell.plain)
    ):
        return cell
    return None


def _plain_ascii(text: str) -> bool:
    """Printable ASCII: one line, each character one column wide, no tab to expand."""
    return text.isascii() and text.isprintable()


def styled(text: str, style: str | None) -> Text:
    """`text` in `style` (a colour, say), as a table cell or a printed line shows it."""
    return Text(printable(text), style=style or "")


_STATUS_COLOURS = {
    "done": "green",
    "approved": "green",
    "rejected": "red",
    "expired": "yellow",
    "waiting": "cyan",
    "pending": "cyan",
    "open": "cyan",
    "not_done": "yellow",
    "ok": "green",
    "live": "green",
    "failed": "red",
    "dead": "red",
    "uncertain": "magenta",
    "cancelled": "yellow",
    "withdrawn": "yellow",
}


def status_text(status: str) -> Text:
    """A status (a run's, a gate's, a call's, a worker's) in its colour."""
    colour = _STATUS_COLOURS.get(status)
    return styled(status, colour)


def whole_ids(table: "Table", *columns: int) -> "Table":
    """Keep the id columns of `table` whole, however narrow the terminal: an id cut short
    cannot be typed back (other columns wrap instead)."""
    for index in columns:
        column = table.columns[index]
        column.no_wrap = True
        column.min_width = max((len(str(cell)) for cell in column.cells), default=0)
    return table


def moment(value: "datetime | None") -> str:
    """A time as the command line prints it: UTC, to the second; `-` for none."""
    from datetime import UTC

    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def print_json(value: Any) -> None:
    """Print `value` as every `--json` prints: indented JSON on stdout, whole however narrow
    the terminal, with no colour or markup. The HTTP API's views (pydantic models), dataclasses,
    times (ISO 8601, as stored: UTC) and amounts (decimal strings) are written as the API
    writes them; text beyond ASCII is escaped, so no character can restyle a terminal."""
    from pydantic import TypeAdapter

    data = TypeAdapter(Any).dump_python(value, mode="json", by_alias=True)
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# How much of a value `remit show` and an error message quote before cutting it short.
SHOWN = 200
QUOTED = 60


def shortened(text: str, *, full: bool = False, width: int = SHOWN) -> str:
    """`text` as a person reads it on one line: control characters escaped and, unless
    `full`, cut at `width` characters with how many more there are."""
    if full or len(text) <= width:
        return printable(text)
    return f"{printable(text[:width])}… ({len(text) - width} more characters; --full shows all)"


def near(text: str, at: int = 0, *, width: int = QUOTED) -> str:
    """A short quote of `text` around position `at`, control characters escaped, with `…`
    where it was cut: enough to find a mistake, never the whole of a large input."""
    start = max(0, at - width // 2)
    end = min(len(text), start + width)
    start = max(0, end - width)
    quoted = printable(text[start:end])
    return f"{'…' if start > 0 else ''}{quoted}{'…' if end < len(text) else ''}"


def json_input(given: str, what: str, app_dir: Path | None, *, cap: str) -> Any:
    """`json_option` under the cap `cap` (a field of `remit.core.limits.Limits`, e.g.
    `input_bytes`) as the settings in the environment set it."""
    from remit.core import limits
    from remit.core.settings import Settings

    settings = Settings.from_env(app_dir or _state.app_path)
    limits.use(limits.Limits.of(settings))  # its depth, for `parse_json`
    bound: int = getattr(limits.current(), cap)
    return json_option(given, what, cap=bound, setting=limits.SETTINGS[cap])


def json_option(given: str, what: str, *, cap: int, setting: str) -> Any:
    """The JSON value an option was given: the text itself, `@PATH` (a file's contents) or
    `-` (standard input). Refused, naming the option, when the file cannot be read, the text
    is not UTF-8 or not JSON (saying where), or it is more than `cap` bytes (`TooLarge`,
    naming `setting`): a file or standard input is read no further than that."""
    from remit.core.errors import RemitError

    if given == "-":
        source = f"{what} - (standard input)"
        data = _read_capped(sys.stdin.buffer, source, cap=cap, setting=setting)
    elif given.startswith("@"):
        if not given[1:]:
            raise RemitError(f"{what} @ names no file: give its path, e.g. {what} @input.json")
        path = Path(given[1:]).expanduser()
        named = str(path)
        source = f"{what} @{near(named, len(named), width=SHOWN)}"  # a long path: its end
        try:
            with path.open("rb") as file:
                data = _read_capped(file, source, cap=cap, setting=setting)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise RemitError(f"{source}: the file cannot be read: {reason}") from None
    else:
        source = what
        data = given.encode("utf-8", "surrogatepass")
        if len(data) > cap:
            raise _too_large(source, len(data), cap=cap, setting=setting)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise RemitError(
            f"{source} is not UTF-8 text (byte {error.start + 1} cannot be read): save it as UTF-8"
        ) from None
    return parse_json(text, source)


def _read_capped(file: Any, source: str, *, cap: int, setting: str) -> bytes:
    """At most `cap` bytes of `file`, or `TooLarge` once there are more (read no further)."""
    data: bytes = file.read(cap + 1)
    if len(data) > cap:
        try:
            size = max(os.fstat(file.fileno()).st_size, cap + 1)
        except (OSError, ValueError, AttributeError):
            size = cap + 1
        raise _too_large(source, size, cap=cap, setting=setting)
    return data


def _too_large(source: str, size: int, *, cap: int, setting: str) -> Exception:
    from remit.core.errors import TooLarge
    from remit.core.limits import size_text

    shown = size_text(size) if size > cap + 1 else f"more than {size_text(cap)}"
    return TooLarge(
        f"{source} is {shown}, over the {size_text(cap)} limit ({setting}): pass a reference to "
        f"the data instead, or raise {setting} where remit runs",
        what=source,
        size=size,
        limit=cap,
        setting=setting,
    )


def parse_json(raw: str, what: str) -> Any:
    """`raw` parsed as JSON, or an error naming `what`, the line and column, and a short quote
    of the text there; refused too when nested too deeply or holding too long an integer
    (`limits.parse_json`)."""
    from remit.core import limits
    from remit.core.errors import RemitError

    try:
        value = limits.parse_json(raw, what, parse_constant=_no_constant)
        # A `\ud800` escape with no partner parses to a lone surrogate, which no database,
        # policy engine or terminal can take.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError as error:
        shown = printable(error.object[error.start : error.end])
        raise RemitError(
            f"{what} holds {shown}, half of a surrogate pair with no other half, which is no "
            "character: remove it, or give the whole pair"
        ) from None
    except json.JSONDecodeError as error:
        raise RemitError(
            f"{what} is not valid JSON: {error.msg} at line {error.lineno}, column "
            f"{error.colno}, near '{near(raw, error.pos)}'"
        ) from None
    except _NotJson as error:
        raise RemitError(
            f"{what} is not valid JSON: it holds {error}, which is no JSON value: give a "
            "number or null"
        ) from None


class _NotJson(ValueError):
    """A constant Python's parser takes and JSON does not have (NaN, Infinity)."""


def _no_constant(name: str) -> Any:
    raise _NotJson(name)


def exit_now(code: int) -> None:
    """End the process now. Attempts that outlived the drain stay with DBOS for the next worker
    with this executor id; their threads must not run on past the bound."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
