"""Which statements `ctx.transaction` refuses: those naming remit's tables or DBOS's."""

from __future__ import annotations

import pytest

from remit.execution.app_writes import refused_table


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("SELECT * FROM remit_runs", "remit_runs"),
        ("select * from invoices join REMIT_LEDGER l on l.id = invoices.id", "REMIT_LEDGER"),
        ('INSERT INTO "remit_data" VALUES (1)', "remit_data"),
        ("UPDATE public.remit_tasks SET status = 'x'", "remit_tasks"),
        ("DELETE FROM dbos.operation_outputs", "dbos"),
        ('TRUNCATE "dbos"."workflow_status"', "dbos"),
        ("UPDATE workflow_status SET status = 'SUCCESS'", "workflow_status"),
        ("SELECT 1 FROM invoices, x JOIN notifications n ON true", "notifications"),
        ("ALTER TABLE ONLY queues ADD COLUMN y int", "queues"),
    ],
)
def test_statements_on_remits_or_dboss_tables_are_named(statement: str, named: str) -> None:
    assert refused_table(statement) == named


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO invoices (id, amount) VALUES (:id, :amount)",
        "SELECT notifications, streams FROM customer_prefs WHERE id = :id",
        "UPDATE invoices SET note = 'copied from remit_runs by hand' WHERE id = 1",
        "CREATE TABLE IF NOT EXISTS my_queues (id int)",
        "SELECT * FROM invoices WHERE status = 'dbos'",
    ],
)
def test_statements_on_the_apps_own_tables_pass(statement: str) -> None:
    assert refused_table(statement) is None
