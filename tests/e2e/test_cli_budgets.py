"""`remit budgets`, `remit budgets set-limit`, and the drift `remit reconcile` reports."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

from remit.core.schema import budget_periods
from tests.e2e.cli_support import Cli


def test_budgets_show_spend_take_a_new_limit_and_reconcile_reports_drift(cli: Cli) -> None:
    period = f"{datetime.now(UTC):%Y-%m}"
    fresh = cli("budgets").stdout
    assert re.search(
        rf"app\s+{period}\s+\$5\.00\s+\$0\.00\s+\$0\.00\s+\$5\.00\s+0\s+declared", fresh
    )

    cli("run", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}')
    ledger = cli("ledger").stdout
    [cost] = re.findall(r"\$0\.\d+", ledger)  # the model call's, the one call with a cost
    spent = cli("budgets").stdout
    assert re.search(rf"app\s+{period}\s+\$5\.00\s+\{cost}\s+\$0\.00\s+\$4\.\d+\s+0\s", spent)

    raised = cli("budgets", "set-limit", "--limit", "7.5", "--as", "user:carol").stdout
    assert f"budget app {period}: limit $7.50, set by user:carol ({cost} spent" in raised
    assert re.search(rf"\$7\.50\s+\{cost}.*user:carol", cli("budgets").stdout)

    refused = cli(
        "budgets",
        "set-limit",
        "--scope",
        "workflow:nope",
        "--limit",
        "1",
        "--as",
        "user:carol",
        check=False,
    )
    assert refused.returncode == 1
    assert "declares no budget for scope `workflow:nope` (it has: app)" in refused.stderr
    refused = cli(
        "budgets",
        "set-limit",
        "--period",
        "2026-W48",
        "--limit",
        "1",
        "--as",
        "user:carol",
        check=False,
    )
    assert refused.returncode == 1
    assert "scope `app` has no weekly budget" in refused.stderr

    with cli.db.begin() as conn:
        conn.execute(budget_periods.update().values(spent_usd=Decimal(1)))
    reconciled = cli("reconcile", "--as", "user:carol").stdout
    assert (
        f"drift: budget app {period}: the counter says $1.00 spent, the ledger {cost}"
        in " ".join(reconciled.split())
    )
    assert "Not corrected" in reconciled
    assert re.search(rf"{period}\s+\$7\.50\s+\$1\.00\s+.*\$0\.99", cli("budgets").stdout)
