"""What the tests of the operator agent's surfaces share: the scripted conversation on the
example desk (`examples/acme`, whose agent runs a scripted fake model under `REMIT_FAKES`), its
words kept here in one place, and the write-off it is about.

carol, a controller, opens a chat about ann's write-off of inv_1003, which waits at its
approval: she asks why it waits, and the agent names the gate (assigned to her); she says to approve it at 400,
and the agent drafts the decision (act `decide`, amount 40000 cents, its id `drf_…`); she reads
it, then confirms it, naming the draft she saw (a confirmation always names it); the chat
records an `act` message with outcome `done`, and the write-off run goes on to done."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from remit import Client
from remit.app import load_app
from remit.core.settings import environment_set
from remit.testing import Harness

ACME = Path(__file__).resolve().parents[1] / "examples" / "acme"

ANN, CAROL, DAVE = "user:ann", "user:carol", "user:dave"
INVOICE = "inv_1003"
WRITE_OFF = "ar.write-off"
# The write-off ann starts, for carol to approve.
WRITE_OFF_INPUT = {
    "invoice_id": INVOICE,
    "reason": "customer in administration",
    "approver": CAROL,
}
# What carol asks; the answer names the gate (its approval id) and says whom it waits for.
WHY = "why is the write-off of inv_1003 waiting?"
WAITS_FOR = "assigned to user:carol"
# What carol says next, and the draft the agent makes of it.
APPROVE = "approve it at 400"
DRAFT_ACT = "decide"
DRAFT_AMOUNT = 40000
DRAFT_SUMMARY = "400.00"
# What the room says when a draft is asked for and there is none; when the draft named (the one
# the person saw) is no longer the chat's; and when a confirmation of it is acting already.
NO_DRAFT = "has no draft"
STALE_DRAFT = "the draft you saw was settled or replaced"
BEING_CONFIRMED = "is being confirmed"
# A draft id no chat holds (remit's ids are drf_ and hex).
GONE_DRAFT = "drf_0000000000000000"
# What `remit chat ask TEXT --yes` says, refusing to confirm a draft the person has not read.
BLIND_YES = "--yes confirms a draft you have read: ask first"
BLIND_NO = "--no discards a draft you have read: ask first"
# What `remit chat ask --yes` says without --draft: it confirms only a draft named.
UNNAMED_YES = "--yes confirms the draft you read, so name it: --draft DRAFT_ID"
# How long a turn of the scripted model may take, under a loaded machine.
TURN_SECONDS = 120.0


@contextlib.contextmanager
def acme_desk(
    database_url: str, fakes: Path, *, actor: str = CAROL, **given: Any
) -> Iterator[Harness]:
    """The example desk on `database_url`, served in this process on fakes that keep their
    state in `fakes` (the credit notes a write-off makes, which the next one's could not)."""
    with (
        environment_set({"REMIT_FAKES_DIR": str(fakes)}),
        Harness(load_app(ACME), database_url=database_url, actor=actor, **given) as harness,
    ):
        yield harness


def start_write_off(client: Client, *, by: str = ANN, timeout: float = 60.0) -> tuple[str, str]:
    """ann's write-off of inv_1003, started and waiting at its approval (assigned to carol):
    (run id, approval id)."""
    run = client.runs.start(WRITE_OFF, WRITE_OFF_INPUT, by=by)
    deadline = time.monotonic() + timeout
    while not (pending := client.approvals.list(status="pending", run_id=run.run_id)):
        assert time.monotonic() < deadline, client.runs.get(run.run_id)
        time.sleep(0.05)
    return run.run_id, pending[0].id


def wait_for_run(client: Client, run_id: str, status: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (run := client.runs.get(run_id)).status != status:
        assert time.monotonic() < deadline, (
            f"{run_id} is {run.status}, never {status}: {run.error}; its calls: "
            + "; ".join(f"{row.op_id} {row.status}" for row in client.calls.ledger(run_id))
        )
        time.sleep(0.05)


def roles(messages: list[dict[str, Any]]) -> list[str]:
    """The roles of a chat's messages, in order, as the API answers them."""
    return [message["role"] for message in messages]
