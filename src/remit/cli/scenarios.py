"""`remit test`: run an app's scenarios (`scenarios/*.feature`) and its tests with pytest.

pytest collects the feature files through remit's plugin (`remit.scenarios.pytest_plugin`),
beside the repo's own tests; the exit code is pytest's, and a failing scenario's report is
what pytest prints for it.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from remit.cli.base import AppDir, app_folder_of, cli, err

PLUGIN = "remit.scenarios.pytest_plugin"


@cli.command(
    "test",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def run_tests(
    ctx: typer.Context,
    path: Annotated[
        Path | None,
        typer.Argument(help="The folder or file to test (default: the app's folder)."),
    ] = None,
    keyword: Annotated[
        str | None,
        typer.Option("-k", help="Only the scenarios and tests whose names match (pytest's -k)."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="Run each scenario on a fresh database on this Postgres server (default: "
            "REMIT_SCENARIO_DATABASE_URL, else a SQLite file).",
        ),
    ] = None,
    app_dir: AppDir = None,
) -> None:
    """Run the scenarios and tests with pytest; any further arguments go to pytest."""
    extra = list(ctx.args)
    if path is not None and str(path).startswith("-"):
        extra, path = [str(path), *extra], None  # an option of pytest's, not a folder
    target = path or app_folder_of(app_dir)
    if not target.exists():
        err.print(f"remit test: {target} does not exist: give the app's folder or a file in it")
        raise typer.Exit(4)
    command = [sys.executable, "-m", "pytest", "-p", PLUGIN, str(target)]
    if keyword is not None:
        command += ["-k", keyword]
    if database_url is not None:
        command += ["--remit-database-url", database_url]
    raise typer.Exit(subprocess.call([*command, *extra]))
