"""What the `remit` command loads before it does anything: `--help` and `--version` load neither
DBOS, FastAPI, OpenTelemetry nor SQLAlchemy, every subcommand's help works without them, the
read-only commands launch nothing and connect to the database with one engine only (the DBOS
client's, a second one, stays unconnected), and `remit runs` on SQLite loads no more than it
reads the runs with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import remit
from remit.client import Client
from tests.e2e.cli_support import ACME, CRASH_APP, Cli

PROBE = Path(__file__).with_name("cli_probe.py")


@dataclass(frozen=True)
class Seen:
    codes: list[int]
    outputs: list[str]
    heavy: list[str]
    packages: list[str]
    remit: list[str]
    engines: int
    threads: list[str]


def probe(*argvs: list[str], engines: bool = False, database_url: str | None = None) -> Seen:
    """Run `remit` with each argv in one fresh interpreter, and say what it saw."""
    env = {**os.environ, "COLUMNS": "200", "REMIT_ACTOR": "user:ann"}
    if database_url is not None:
        env["REMIT_DATABASE_URL"] = database_url
    done = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(argvs), *(["--engines"] if engines else [])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Seen(**json.loads(done.stdout.splitlines()[-1]))


def test_help_loads_no_heavy_module() -> None:
    seen = probe(["--help"])
    assert seen.heavy == []
    # Its help is plain text: no Markdown parser, no syntax highlighter, no pydantic.
    assert {"markdown_it", "pygments", "pydantic"} & set(seen.packages) == set()
    assert seen.codes == [0]
    [printed] = seen.outputs
    assert "durable workflows for a business's operations" in printed
    for command in ("runs", "approve", "worker", "budgets", "secrets", "deploy"):
        assert command in printed


def test_help_lists_every_command_under_a_heading_with_its_whole_first_sentence() -> None:
    [printed] = probe(["--help"]).outputs
    headings = [line[:-1] for line in printed.splitlines() if line and not line[0].isspace()]
    assert headings[-7:] == [
        "Runs",
        "People",
        "Ops, data and money",
        "Policies and access",
        "Resources",
        "Changes",
        "Running the app",
    ]
    commands = printed.split("Runs:\n", 1)[1].splitlines()
    listed = {line.split()[0] for line in commands if line[:2] == "  " and line[2:3].strip()}
    assert listed == {command[0] for command in COMMANDS}
    assert "..." not in printed.split("Runs:\n", 1)[1]  # no help cut short
    whole = " ".join(printed.split())
    assert "the op data.<collection>.<verb>, called directly as the app's policies allow." in whole


def test_version_loads_no_heavy_module() -> None:
    seen = probe(["--version"])
    assert seen.heavy == []
    assert seen.codes == [0]
    assert seen.outputs == [f"remit {remit.__version__}\n"]


COMMANDS = [
    ["worker"],
    ["start"],
    ["run"],
    ["reconcile"],
    ["pause"],
    ["resume"],
    ["deadlines"],
    ["schedules"],
    ["schedules", "pause"],
    ["schedules", "resume"],
    ["runs"],
    ["show"],
    ["send"],
    ["state"],
    ["cancel"],
    ["ledger"],
    ["workers"],
    ["approvals"],
    ["approvals", "withdraw"],
    ["approve"],
    ["reject"],
    ["serve"],
    ["call"],
    ["data"],
    ["policies"],
    ["policies", "schema"],
    ["policies", "explain"],
    ["denials"],
    ["tasks"],
    ["task", "resolve"],
    ["activity"],
    ["telegram", "set-webhook"],
    ["budgets"],
    ["budgets", "set-limit"],
    ["secrets", "set"],
    ["secrets", "list"],
    ["secrets", "delete"],
    ["deploy", "check"],
    ["retry"],
    ["tokens", "create"],
    ["tokens", "list"],
    ["tokens", "revoke"],
    ["login-link"],
    ["passwords", "set"],
    ["wakeup", "connect"],
    ["plan"],
    ["apply"],
    ["drift"],
    ["import"],
    ["resources"],
    ["change", "open"],
    ["change", "show"],
    ["changes"],
    ["deploys"],
    ["chat", "talk"],  # `remit chat [CHAT_ID]`, the interactive chat
    ["chat", "ask"],
    ["chat", "show"],
    ["chats"],
    ["test"],
    ["try"],
    ["init"],
    ["apps"],
    ["demo"],
    ["fakes", "show"],
]


def test_every_command_has_its_help_without_heavy_modules() -> None:
    seen = probe(*[[*command, "--help"] for command in COMMANDS])
    assert seen.codes == [0] * len(COMMANDS)
    for command, printed in zip(COMMANDS, seen.outputs, strict=True):
        assert f"remit {' '.join(command)} [OPTIONS]" in printed, printed
        assert "--app" in printed, printed
    assert seen.heavy == []


READ_ONLY = [
    ["runs"],
    ["approvals"],
    ["tasks"],
    ["ledger"],
    ["deadlines"],
    ["workers"],
    ["denials"],
    ["budgets"],
    ["secrets", "list"],
]


def test_read_only_commands_launch_nothing(database_url: str) -> None:
    with Client.connect(ACME, database_url, by="user:ann") as client:
        run = client.runs.start("ar.chase-invoice", {"invoice_id": "inv_1001"})
    seen = probe(
        *[["--app", str(ACME), *command] for command in READ_ONLY],
        engines=True,
        database_url=database_url,
    )
    assert seen.codes == [0] * len(READ_ONLY)
    listed = seen.outputs[0]
    assert run.run_id in listed
    assert "queued" in listed
    # Each command's client connects its database's engine, and no other: no DBOS client
    # connection, no DBOS launch, no thread left behind.
    assert seen.engines == len(READ_ONLY)
    assert seen.threads == []


# What listing runs has no use for: DBOS (it makes no DBOS client), OpenTelemetry (it makes no
# span), FastAPI, httpx (it calls no vendor), cryptography (it reads no secret), cedarpy (it
# checks no policy), and the app's own code (`examples`: the desk's modules, which import httpx
# for their drivers).
NOT_FOR_RUNS = {"dbos", "opentelemetry", "fastapi", "httpx", "cryptography", "cedarpy", "examples"}
# What it does load besides the standard library: remit, SQLAlchemy, Typer (with Pydantic, which
# coerces options, and shellingham) and Rich.
FOR_RUNS = {
    "remit",
    "sqlalchemy",
    "typer",
    "shellingham",
    "annotated_doc",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "rich",
    "cython_runtime",
}


@pytest.mark.parametrize(
    ("app", "workflow", "given"),
    [
        (CRASH_APP, "payout", {"account": "a", "amount": 10}),
        (ACME, "ar.chase-invoice", {"invoice_id": "inv_1001"}),
    ],
    ids=["crash_app", "acme"],
)
def test_runs_on_sqlite_loads_only_what_it_reads_with(
    tmp_path: Path, app: Path, workflow: str, given: dict[str, object]
) -> None:
    url = f"sqlite:///{tmp_path / 'remit.sqlite'}"
    with Client.connect(app, url, by="user:ann") as client:
        run = client.runs.start(workflow, given)
    seen = probe(["--app", str(app), "runs"], database_url=url)
    assert seen.codes == [0]
    assert run.run_id in seen.outputs[0]
    assert "sqlalchemy" in seen.packages  # the probe sees what the command loaded
    assert NOT_FOR_RUNS & set(seen.packages) == set()
    # Nothing else either: any other package (a database driver, a vendor's client, YAML, ...)
    # or any of remit's modules beyond its command line, its client and its core.
    others = {
        name
        for name in seen.packages
        if name not in sys.stdlib_module_names and not name.startswith("_")
    }
    assert others <= FOR_RUNS, others - FOR_RUNS
    # The client's runs room is `remit.ops.runs`: of `remit.ops`, only that.
    assert {name.split(".")[1] for name in seen.remit} <= {
        "_version",
        "cli",
        "client",
        "core",
        "ops",
    }
    assert {name for name in seen.remit if name.startswith("remit.ops")} <= {
        "remit.ops",
        "remit.ops.runs",
    }


def test_runs_are_listed_while_the_apps_code_is_broken(cli: Cli, tmp_path: Path) -> None:
    app = tmp_path / "desk"
    shutil.copytree(ACME, app, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    run_id = cli("start", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}', app=app)
    with (app / "app.py").open("a") as source:
        source.write("\nraise RuntimeError('half-way through an edit')\n")
    listed = cli("runs", app=app)
    assert run_id.stdout.strip() in listed.stdout
    started = cli(
        "start", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1002"}', app=app, check=False
    )
    assert started.returncode == 1
    assert "half-way through an edit" in started.stderr


def test_a_command_line_builds_only_the_command_it_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Typer would build every command's options from its annotations before parsing any:
    `remit` builds the one it runs (`cli/base._Commands`), and `--help` all of them."""
    import typer.main

    from remit.cli.main import main

    built: list[str | None] = []
    build = typer.main.get_command_from_info

    def recording(*info: Any, **settings: Any) -> Any:
        command = build(*info, **settings)
        built.append(command.name)
        return command

    monkeypatch.setattr(typer.main, "get_command_from_info", recording)
    for argv, expected in [
        (["runs", "--help"], ["runs"]),
        (["deploy", "check", "--help"], ["check"]),
        (["--version"], []),
    ]:
        built.clear()
        monkeypatch.setattr(sys, "argv", ["remit", *argv])
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code == 0
        assert built == expected, argv
    built.clear()
    monkeypatch.setattr(sys, "argv", ["remit", "--help"])
    with pytest.raises(SystemExit):
        main()
    assert len(built) > len(COMMANDS)
    capsys.readouterr()
