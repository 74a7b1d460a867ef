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
        ("UPDATE public.remit_tasks SET status = 'x'", "public.remit_tasks"),
        ("SELECT * FROM invoices i, remit_runs AS r WHERE i.id = r.run_id", "remit_runs"),
        ("DELETE FROM invoices USING remit_runs WHERE true", "remit_runs"),
        ("DELETE FROM dbos.operation_outputs", "dbos"),
        ('TRUNCATE "dbos"."workflow_status"', "dbos"),
    ],
)
def test_remits_tables_and_dboss_schema_are_named_on_either_database(
    statement: str, named: str
) -> None:
    assert refused_table(statement, sqlite=False) == named
    assert refused_table(statement, sqlite=True) == named


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("UPDATE workflow_status SET status = 'SUCCESS'", "workflow_status"),
        ("SELECT 1 FROM invoices JOIN notifications n ON true", "notifications"),
        ("ALTER TABLE ONLY queues ADD COLUMN y int", "queues"),
    ],
)
def test_dboss_tables_are_named_on_sqlite_where_they_have_no_schema(
    statement: str, named: str
) -> None:
    assert refused_table(statement, sqlite=True) == named
    assert refused_table(statement, sqlite=False) is None


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO invoices (id, amount) VALUES (:id, :amount)",
        "INSERT INTO invoices (id, remit_to_address, remit_run_id) VALUES (1, 'a', 'b')",
        "SELECT notifications, streams FROM customer_prefs WHERE id = :id",
        "UPDATE invoices SET note = 'copied from remit_runs by hand' WHERE id = 1",
        "SELECT 1 FROM invoices -- not remit_runs\nWHERE id = 1",
        "CREATE TABLE IF NOT EXISTS my_queues (id int)",
        "SELECT * FROM invoices WHERE status = 'dbos'",
        "SELECT * FROM invoices i, customers c WHERE i.customer = c.id",
    ],
)
def test_statements_on_the_apps_own_tables_pass(statement: str) -> None:
    assert refused_table(statement, sqlite=True) is None
