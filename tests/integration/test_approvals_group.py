"""A gate assigned to a group of `policies/principals.toml` (`assignee="group:controllers"`):
it waits in each member's inbox and no one else's, any member decides it (a member of a group
within it too), anyone else is refused, and a group the file does not list fails the run at
the gate saying so. On Telegram its message reaches the members with a Telegram id; a tap on
the message of a gate withdrawn meanwhile says so and decides nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit import DecisionRefused
from remit.people.notify import ApprovalNotice
from remit.people.telegram import TelegramBot, TelegramNotifier, recipients
from remit.policy.cedar import Policy
from remit.serve.api import create_api
from remit.serve.fake_telegram import FakeTelegram, callback_update
from remit.serve.telegram import SECRET_HEADER, WEBHOOK_PATH, add_telegram_routes
from remit.testing import Harness
from tests.integration.test_approvals_withdraw import desk_app

TOKEN = "123456:AAF-telegram-token-Zq9xW"
SECRET = "webhook-secret_42"
ANN, CAROL, DAN = 111, 333, 444


@pytest.fixture
def h(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    """A worker on the desk, acting as Ann unless a verb says otherwise."""
    with Harness(desk_app(tmp_path), database_url=database_url, actor="user:ann") as running:
        yield running


def test_a_group_gate_waits_for_each_member_and_a_member_decides_it(h: Harness) -> None:
    run = h.start("errand", {"sku": "sku-1", "assignee": "group:controllers"})
    gate = h.gate(run.run_id)
    assert gate.assignee == "group:controllers"

    def inbox(who: str) -> list[str]:
        return [item.approval.id for item in h.approvals.decidable(by=who)]

    assert inbox("user:carol") == inbox("user:dan") == [gate.id]
    # Ann and Bob are clerks the policies let decide, but not controllers; Eve is neither.
    assert inbox("user:ann") == inbox("user:bob") == inbox("user:eve") == []
    with pytest.raises(DecisionRefused) as refused:
        h.decide(gate.id, "approved", by="user:ann")
    assert str(refused.value) == (
        f"decision refused, nothing was written: {gate.id} is assigned to "
        "group:controllers; user:ann is not in it nor an admin"
    )
    assert h.approvals.get(gate.id).status == "pending"

    h.decide(gate.id, "approved", by="user:dan")
    assert h.wait(run.run_id).output == {
        "branch": "approved",
        "order_id": "ord_1",
        "by": "user:dan",
    }
    assert inbox("user:carol") == []

    # Assigned to the clerks, a gate is Carol's too: controllers are a group within them.
    nested = h.start("errand", {"sku": "sku-1", "assignee": "group:clerks"})
    other = h.gate(nested.run_id)
    assert inbox("user:carol") == inbox("user:bob") == [other.id]
    assert inbox("user:eve") == []
    h.decide(other.id, "rejected", by="user:carol")
    assert h.wait(nested.run_id).output == {"branch": "rejected"}


def test_a_gate_assigned_to_a_group_no_one_lists_fails_its_run_saying_so(h: Harness) -> None:
    run = h.start("errand", {"sku": "sku-1", "assignee": "group:auditors"})
    failed = h.wait(run.run_id)
    assert failed.status == "failed"
    assert failed.error is not None
    assert (
        "approval `errand` is assigned to group:auditors, but policies/principals.toml lists "
        "no group `auditors`, nor do the data files declare it (the groups there are: "
        "group:clerks, group:controllers, group:outsiders): assign it to one of those, or add "
        "the group to principals.toml's [groups] or as a remit.group declaration"
    ) in failed.error
    assert h.approvals.list(run_id=run.run_id) == []


def test_routing_a_group_gate_tells_its_members_the_policies_let_decide(tmp_path: Path) -> None:
    policy = desk_app(tmp_path).policy
    assert policy.groups["clerks"] == {"user:ann", "user:bob", "user:carol", "user:dan"}
    assert policy.in_group("user:dan", "controllers")
    assert not policy.in_group("user:ann", "controllers")
    assert not policy.in_group("user:ann", "auditors")
    notice = _notice(assignee="group:controllers")
    assert recipients(notice, policy) == ["user:carol", "user:dan"]
    # Eve is an outsider the policies let decide nothing: the buttons would only refuse her.
    assert recipients(_notice(assignee="group:outsiders"), policy) == []
    assert recipients(notice, Policy.open()) == []


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


def test_on_telegram_a_group_gate_reaches_its_members_and_a_withdrawn_one_says_so(
    database_url: str, tmp_path: Path, telegram: FakeTelegram
) -> None:
    holder: list[Policy] = []
    notifier = TelegramNotifier(lambda: holder[0], TOKEN, api_base=telegram.url)
    app = desk_app(tmp_path, notifiers=[notifier])
    holder.append(app.policy)
    with Harness(app, database_url=database_url, actor="user:ann") as h:
        api = create_api(h.client, allowed_hosts=["testserver"])
        bot = TelegramBot(TOKEN, api_base=telegram.url)
        add_telegram_routes(api, h.client, secret_token=SECRET, bot=bot)
        run = h.start("errand", {"sku": "sku-1", "assignee": "group:controllers"})
        gate = h.gate(run.run_id)
        sent = {call.body["chat_id"]: call for call in telegram.wait_calls("sendMessage", 2)}
        # Carol and Dan, not Ann (who asked, and is no controller) nor Eve.
        assert sorted(sent) == [CAROL, DAN]
        assert "Assigned to group:controllers" in sent[CAROL].body["text"]

        h.approvals.withdraw(gate.id, reason="no longer needed")
        assert h.wait(run.run_id).output == {
            "branch": "withdrawn",
            "by": "user:ann",
            "reason": "no longer needed",
        }

        with TestClient(api) as http:
            data = FakeTelegram.buttons(sent[DAN])["Approve"]
            update = callback_update(1, from_id=DAN, data=data, message=sent[DAN])
            answer = http.post(WEBHOOK_PATH, json=update, headers={SECRET_HEADER: SECRET})
        assert answer.status_code == 200
        assert answer.json()["outcome"] == "refused: this approval is already withdrawn by user:ann"
        (told,) = telegram.calls_of("answerCallbackQuery")
        assert told.body["text"] == "Not decided: this approval is already withdrawn by user:ann"
        (edited,) = telegram.calls_of("editMessageText")
        assert edited.body["text"].startswith("Approval withdrawn: Refund sku-1 at 1200")
        assert edited.body["text"].endswith("Withdrawn by user:ann via api: no longer needed")
        assert "reply_markup" not in edited.body  # its buttons are gone
        assert h.approvals.get(gate.id).status == "withdrawn"


def _notice(*, assignee: str | None) -> ApprovalNotice:
    return ApprovalNotice(
        approval_id="apr_0123456789abcdef",
        run_id="run_1",
        workflow="errand",
        key="errand",
        type="refund",
        title="Refund",
        draft={"sku": "sku-1", "quantity": 1, "note": ""},
        assignee=assignee,
        created_at=datetime(2026, 3, 1, tzinfo=UTC),
        expires_at=None,
    )
