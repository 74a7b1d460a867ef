"""`remit demo`: the whole app in one process on fakes, to try or to show; `remit fakes show`:
what a demo's fake vendors hold.

The demo is `serve/demo.py`'s `Demo` behind the HTTP API; `--script` plays a session on it
(`serve/script.py`) and stops it at the end.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from remit.cli.base import (
    AppDir,
    PlainTable,
    cli,
    command_group,
    err,
    exit_now,
    folder_of,
    here_only,
    load,
    out,
    print_json,
    remote_of,
)

if TYPE_CHECKING:
    from remit.app import App
    from remit.serve.demo import Call, Demo, Seed
    from remit.serve.script import Line, Player

# Where `remit demo` looks for scenarios whose givens seed it, under the app's folder.
FEATURES = "demo"


@cli.command()
def demo(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The port on 127.0.0.1 (default: a free one).")
    ] = 0,
    script: Annotated[
        Path | None,
        typer.Option(
            "--script",
            help="Play this session against the demo, print each command and its output, then "
            "stop (exit 0 when every line behaved).",
        ),
    ] = None,
    stay: Annotated[
        bool | None,
        typer.Option(
            "--stay/--no-stay",
            help="After the script, keep serving (the web console and the API) until Ctrl-C. "
            "Default: when run in a terminal.",
        ),
    ] = None,
    app_dir: AppDir = None,
) -> None:
    """Run the whole app in this process, on fakes: a worker and the HTTP API on a fresh SQLite
    database in .remit/demo/ (wiped at start), one fake per vendor for every run and call.

    It prints the API's address, the tokens it made (in .remit/demo/instance.json) and how to
    point the command line at it, and a one-time link per principal to its web console, then
    serves until Ctrl-C; with --script it plays the script and stops (in a terminal, or with
    --stay, it then prints the console's links and serves on).
    """
    from remit.serve.demo import DEMO_HOST, Demo
    from remit.serve.script import parse_script
    from remit.serve.server import serve as serve_http

    here_only("demo")
    folder = folder_of(app_dir)
    lines = None if script is None else parse_script(_read(script), source=str(script))
    app, _ = load(folder)
    instance = Demo.of(app, folder)
    keep = (sys.stdin.isatty() and sys.stdout.isatty()) if stay is None else stay
    played: dict[str, int] = {}
    players: list[Player] = []  # the script's, once the demo answers
    try:
        instance.start(seed=_feature_seed(folder, app))

        def listening(url: str) -> None:
            path = instance.publish(url)
            _tell(instance, url, path, quiet=lines is not None)
            if lines is not None and script is not None:
                players.append(_player(instance, folder, url))
                threading.Thread(
                    target=_play,
                    args=(players[0], lines, script, played),
                    kwargs={"then": (lambda: _tell_console(instance, url)) if keep else None},
                    name="remit-demo-script",
                    daemon=True,
                ).start()

        serve_http(
            instance.api(),
            host=DEMO_HOST,
            port=port,
            drain_timeout=instance.settings.drain_timeout,
            listening=listening,
        )
    finally:
        ended = dict(played)  # how the script ended, when it did before the demo stopped
        # The script's thread dies with the process: its commands are ended here, not by it.
        for player in players:
            player.stop()
        instance.close()
    if lines is None:
        err.print("demo stopped")
        exit_now(0)
    if "code" not in ended:
        err.print(f"[red]the demo stopped before {script} ended[/]")
        exit_now(1)
    exit_now(ended["code"])


def _read(script: Path) -> str:
    from remit.core.errors import RemitError

    try:
        return script.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RemitError(f"--script {script}: the file cannot be read ({error})") from None


def _feature_seed(folder: Path, app: "App") -> "Seed | None":
    """What seeds the demo: the connector givens in the backgrounds of the repo's
    `demo/*.feature`, or, without any, of its scenarios (`scenarios/`, `apps/<app>/scenarios/`);
    nothing when it has neither."""
    from remit.scenarios import feature_files, seed

    features = sorted((folder / FEATURES).glob("*.feature")) or feature_files(folder)
    if not features:
        return None

    def seeding(call: "Call") -> None:
        seed(app, features, _Calls(call))

    return seeding


class _Calls:
    """The demo's direct calls as the scenarios' seeding makes them (`call(op, input, by=)`)."""

    def __init__(self, call: "Call") -> None:
        self._call = call

    def call(self, op_id: str, input: Mapping[str, Any], *, by: str | None = None) -> Any:
        return self._call(op_id, input, by)


def _tell(instance: "Demo", url: str, path: Path, *, quiet: bool) -> None:
    """Print where the demo answers and how to reach it (a script's session: one line)."""
    actor = instance.settings.actor
    vendors = sorted(instance.fakes)
    if quiet:
        err.print(f"demo of [bold]{instance.app.name}[/] on {url} (tokens in {path})")
        return
    out.print(f"demo of [bold]{instance.app.name}[/] on fakes, serving its API on {url}")
    out.print(f"database: {instance.settings.database_url} (wiped at the next `remit demo`)")
    out.print(f"API tokens, by who they act as (also in {path}):")
    width = max(len(principal) for principal in instance.tokens)
    for principal, token in instance.tokens.items():
        out.print(Text(f"  {principal:<{width}}  {token}"))
    out.print(f"point the command line at it, as {actor}:")
    out.print(Text(f"  export REMIT_URL={url} REMIT_TOKEN={instance.tokens[actor]}"))
    if vendors:
        out.print(f"see what a fake vendor holds: remit fakes show VENDOR ({', '.join(vendors)})")
    _tell_console(instance, url)
    out.print("Ctrl-C stops the demo")


def _tell_console(instance: "Demo", url: str) -> None:
    """Print the web console's address and a sign-in link for each principal."""
    out.print(f"web console: {url}/console/ (each link signs its person in once):")
    links = instance.sign_in_links(url)
    width = max(len(principal) for principal in links)
    for principal, link in links.items():
        out.print(Text(f"  {principal:<{width}}  {link}"))


def _player(instance: "Demo", folder: Path, url: str) -> "Player":
    """The player of a script against the demo at `url`, as the demo's default actor."""
    from remit.serve.script import Player

    environ = {
        **os.environ,
        # A command that would open a database finds the demo's, never the app's own.
        "REMIT_DATABASE_URL": instance.settings.database_url,
    }
    return Player(
        app_folder=folder,
        url=url,
        tokens=instance.tokens,
        actor=instance.settings.actor,
        environ=environ,
        out=sys.stdout,
    )


def _play(
    player: "Player",
    lines: "list[Line]",
    script: Path,
    played: dict[str, int],
    *,
    then: Callable[[], None] | None,
) -> None:
    """Play the script, note how it went in `played`, then call `then` and serve on, or (with
    no `then`) stop the server. A demo stopped from outside stops the player: then it says
    nothing, and `demo` tells how it ended."""
    from remit.serve.script import ScriptError

    try:
        player.play(lines)
    except ScriptError as failed:
        if not player.stopped:
            err.print(Text(f"{script}: {failed}", style="red"))
        played["code"] = 1
    except Exception as error:  # the script ends the demo however it ends
        err.print(Text(f"{script}: {type(error).__name__}: {error}", style="red"))
        played["code"] = 1
    else:
        err.print(f"{script}: every line behaved")
        played["code"] = 0
    finally:
        if player.stopped:  # the server has stopped already
            pass
        elif then is not None:
            then()
            out.print("the demo serves on: Ctrl-C stops it")
        else:
            os.kill(os.getpid(), signal.SIGTERM)


fakes_cli = command_group("What the fake vendors of a demo hold.", no_args_is_help=True)
cli.add_typer(fakes_cli, name="fakes")


@fakes_cli.command("show")
def show(
    vendor: Annotated[str, typer.Argument(help="The vendor, e.g. payments.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the state as JSON.")] = False,
    app_dir: AppDir = None,
) -> None:
    """Print what a demo's fake vendor holds (its invoices, its outbox, the writes it applied):
    the demo at REMIT_URL with REMIT_TOKEN, else the one running for the app."""
    from remit.remote import RemoteClient
    from remit.serve.demo import read_instance

    url, token = remote_of()
    if url is None:
        instance = read_instance(folder_of(app_dir))
        url, token = instance["url"], instance["tokens"][instance["actor"]]
    elif token is None:
        from remit.core.errors import RemitError

        raise RemitError(
            f"asking {url} needs an API token: pass --token or set REMIT_TOKEN (`remit demo` "
            "prints one)"
        )
    with RemoteClient(url, token) as remote:
        state = remote.fake_state(vendor)
    if as_json:
        print_json(state)
        return
    out.print(f"[bold]{vendor}[/] (fake)")
    for name, value in state.items():
        _show_part(name, value)


def _show_part(title: str, value: Any) -> None:
    """One part of a fake's state as a person reads it: records as a table, the rest as JSON."""
    if isinstance(value, list) and value and all(isinstance(each, dict) for each in value):
        _table(title, value)
    elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        if all(isinstance(inner, dict) for v in value.values() for inner in v.values()):
            for name, part in value.items():
                _show_part(f"{title} {name}", part)
        else:
            _table(title, [{"id": key, **fields} for key, fields in value.items()])
    elif value in ([], {}):
        out.print(Text(f"{title}: none"))
    else:
        out.print(Text(f"{title}: {_cell(value)}"))


def _table(title: str, rows: list[dict[str, Any]]) -> None:
    columns = list(dict.fromkeys(name for row in rows for name in row))
    table = PlainTable(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    out.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)
