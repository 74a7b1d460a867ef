"""The desk the probes share: its harness (acting as ann), the API as ann, the gate and run the
probes name, and how many rows the tables a refusal must not touch hold."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit.testing import Harness

# What a refused request must leave as it was: remit's runs, ledger, gates, decisions, tasks,
# records and request keys, and DBOS's workflows.
COUNTED = (
    "remit_runs",
    "remit_ledger",
    "remit_approvals",
    "remit_decisions",
    "remit_tasks",
    "remit_data",
    "remit_request_keys",
    "workflow_status",
)
MiB = 1024 * 1024


@dataclass
class Desk:
    """The shared desk: its harness (acting as ann), the API as ann, and what the probes name."""

    harness: Harness
    http: TestClient
    database_url: str
    files: Path
    approval: str
    run: str

    def counts(self) -> dict[str, int]:
        """How many rows each counted table holds now."""
        db = self.harness.client.db
        dbos = "" if db.is_sqlite else "dbos."
        with db.engine.connect() as conn:
            return {
                table: conn.execute(
                    sa.text(
                        f"SELECT count(*) FROM {dbos if table == 'workflow_status' else ''}{table}"
                    )
                ).scalar_one()
                for table in COUNTED
            }

    def ready(self) -> None:
        """Make sure the approval the probes name is pending: a probe wrongly let through may
        have decided it, and the next must still meet a pending gate."""
        if self.harness.client.approvals.get(self.approval).status != "pending":
            self.harness.wait(self.run, timeout=60)  # its run carries on, writing rows
            started = self.harness.start("ar.write-off", {"invoice_id": "inv_1003"})
            self.approval = self.harness.gate(started.run_id).id
            self.run = started.run_id

    def fill(self, text: str) -> str:
        """`text` with `{files}`, `{approval}` and `{run}` filled in, and `{key}` as a key
        no request has used."""
        text = text.replace("{key}", f"probe-{uuid.uuid4().hex}")
        for name, value in (("files", self.files), ("approval", self.approval), ("run", self.run)):
            text = text.replace(f"{{{name}}}", str(value))
        return text
