"""`remit wakeup`: the wakeup service that starts a stopped instance again on time, and an
instance's side of it."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from remit.cli.base import cli, command_group

wakeup_cli = command_group(
    "Scale to zero: run the wakeup service, connect an instance to one, see its state.",
    no_args_is_help=True,
)
cli.add_typer(wakeup_cli, name="wakeup")
