"""A start under a key, on both databases: the same start again makes no second run and answers
with the first one's, from the client, through the HTTP API and from another principal's view;
the key with another input is refused, having written nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remit import AppError, Client
from remit.core.errors import KeyReused
from tests.e2e.cli_support import ACME

INVOICE = {"invoice_id": "inv_1003", "customer_email": "ap@contoso.example"}


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[Client]:
    environ = {"REMIT_SECRET_KEY_FILE": str(tmp_path / "secret.key")}
    with Client.connect(ACME, database_url, by="user:ann", environ=environ) as client:
        yield client


def test_the_same_start_under_a_key_is_one_run(client: Client) -> None:
    first = client.runs.start_row("ar.chase-invoice", INVOICE, key="chase-inv_1003")
    again = client.runs.start_row("ar.chase-invoice", dict(INVOICE), key="chase-inv_1003")
    assert again.run_id == first.run_id
    assert [run.run_id for run in client.runs.list(workflow="ar.chase-invoice")] == [first.run_id]
    # Another principal's key of the same name is theirs: a run of its own.
    theirs = client.runs.start_row(
        "ar.chase-invoice", INVOICE, key="chase-inv_1003", by="agent:ar-bot"
    )
    assert theirs.run_id != first.run_id
    # Without a key, each start is a run.
    assert client.runs.start_row("ar.chase-invoice", INVOICE).run_id not in (
        first.run_id,
        theirs.run_id,
    )


def test_a_key_used_again_for_another_start_is_refused(client: Client) -> None:
    first = client.runs.start_row("ar.chase-invoice", INVOICE, key="k-1")
    with pytest.raises(KeyReused, match=f"was first used to start run {first.run_id}"):
        client.runs.start_row("ar.chase-invoice", {**INVOICE, "invoice_id": "inv_1004"}, key="k-1")
    with pytest.raises(AppError, match="start key 'a key' must be 1 to 200 printable"):
        client.runs.start_row("ar.chase-invoice", INVOICE, key="a key")
    assert len(client.runs.list(workflow="ar.chase-invoice")) == 1
