"""`remit init NAME`: a new repo in `./NAME/`, or, in a folder that is a repo already, a new app
in its `apps/NAME/` (the rule and the templates are in `remit.init.scaffold`)."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from remit.cli.base import AppDir, app_folder_of, cli, out


@cli.command("init")
def init(
    name: Annotated[
        str, typer.Argument(help="The new repo's name (its folder's), or the new app's.")
    ],
    app_dir: AppDir = None,
) -> None:
    """Make a new repo NAME/ in the folder (default: the current one), ready for `remit test`
    and `remit demo`; in a folder that is a repo already, add the app apps/NAME/ to it.

    A repo is a folder holding apps/, workflows/, connectors/ or app.py. Nothing is
    overwritten: a repo folder that is not empty, or any file the app would add, is refused
    before anything is written.
    """
    from remit.init.scaffold import plan

    where = app_folder_of(app_dir)
    made = plan(name, where)
    made.write()
    root = _shown(made.root)
    if made.kind == "repo":
        out.print(f"made the repo [bold]{name}[/] in {escape(root)}:")
    else:
        repo = escape(made.root.name)
        out.print(f"added the app [bold]{name}[/] to the repo {repo} in {escape(root)}:")
    out.print(Text(made.tree()))
    out.print("next:")
    if made.kind == "repo":
        out.print(Text(f"  cd {shlex.quote(root)}"))
    out.print("  remit test    # its scenarios and tests, on the fakes")
    out.print("  remit demo    # the repo in one process on the fakes, seeded by the scenarios")


def _shown(path: Path) -> str:
    """`path` as the user would type it from here: relative when it is inside the current
    folder, else whole."""
    here = Path.cwd().resolve()
    if path != here and path.is_relative_to(here):
        return str(path.relative_to(here))
    return str(path)
