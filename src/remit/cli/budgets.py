"""`remit budgets`: each budget period's limit, what it spent, what calls in flight reserved,
and its drift (the counter against the ledger); `remit budgets set-limit` changes a period's
limit, as someone does once spending more is approved."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import Annotated

import typer

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    command_group,
    out,
    print_json,
    styled,
)

budgets_cli = command_group(
    "The app's budgets: each period's limit, spend, reservations and drift.",
    invoke_without_command=True,
)
cli.add_typer(budgets_cli, name="budgets")


@budgets_cli.callback()
def show(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="How many periods, newest first.")] = 50,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List each budget period: its limit, spent, reserved by calls in flight, what is left,
    and drift (the counter less the sum of its calls' ledger costs: 0 unless something wrote
    one without the other)."""
    if ctx.invoked_subcommand is not None:
        return
    from remit.budgets.model import usd

    with client_of(app_dir) as remit:
        app_name = remit.app_name
        periods = remit.budgets.periods(limit=limit)
    if as_json:
        from remit.serve.models import BudgetPeriod

        print_json([BudgetPeriod.of(state, drift) for state, drift in periods])
        return
    if not periods:
        out.print(
            f"app {app_name} declares no budgets: add Budget(...) to App(budgets=[...]) to "
            "limit what calls with a cost may spend"
        )
        return
    table = PlainTable(
        "scope",
        "period",
        "limit",
        "spent",
        "reserved",
        "left",
        "drift",
        "limit set by",
        box=None,
    )
    for state, off in periods:
        left = state.limit_usd - state.spent_usd - state.reserved_usd
        table.add_row(
            state.scope,
            state.period,
            usd(state.limit_usd),
            usd(state.spent_usd),
            usd(state.reserved_usd),
            usd(left) if left >= 0 else styled(usd(left), "red"),
            "0" if off == 0 else styled(usd(off), "red"),
            state.limit_set_by or "declared",
        )
    out.print(table)


@budgets_cli.command("set-limit")
def set_limit(
    limit: Annotated[str, typer.Option("--limit", help="The period's new limit in USD.")],
    scope: Annotated[
        str, typer.Option("--scope", help="`app`, or `workflow:<name>` for a workflow's budget.")
    ] = "app",
    period: Annotated[
        str | None,
        typer.Option(
            "--period",
            help="The period: 2026-11, 2026-W48 or 2026-11-29 (default: the current one).",
        ),
    ] = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Set one budget period's limit (raise it, or lower it), recorded in the audit log. Later
    periods start at the app's declared limit again."""
    from remit.budgets.model import usd

    with client_of(app_dir) as remit:
        state = remit.budgets.set(scope, limit, period=period, by=as_)
    out.print(
        f"budget {state.scope} {state.period}: limit {usd(state.limit_usd)}, set by {state.limit_set_by} "
        f"({usd(state.spent_usd)} spent, {usd(state.reserved_usd)} reserved)"
    )
