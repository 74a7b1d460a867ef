"""Telegram as an approval channel, end to end against a fake Bot API server: a gate's
recipients get Approve and Reject buttons, and a tap on one, delivered to the webhook, decides
the gate once, as the principal the `[telegram]` table names, under the app's policies."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from remit import App
from remit.connectors.credentials import SecretKey, Secrets
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.people.notify import ApprovalNotice
from remit.people.telegram import (
    TelegramBot,
    TelegramError,
    TelegramNotifier,
    decode_callback,
    recipients,
    stored_token,
    telegram_ids,
)
from remit.policy.cedar import Policy
from remit.serve.api import create_api
from remit.serve.fake_telegram import BotCall, FakeTelegram, callback_update
from remit.serve.telegram import SECRET_HEADER, STRANGER, WEBHOOK_PATH, add_telegram_routes
from remit.testing import Harness, ManualClock
from tests.support import FakeShop, make_app

TOKEN = "123456:AAF-telegram-token-Zq9xW"
SECRET = "webhook-secret_42"
ANN, BOB, CAROL, DAVE = 111, 222, 333, 444

# Clerks may reject any refund and approve one of up to 2 items; managers may do anything;
# bystanders nothing. Bob is a clerk with no Telegram id.
DESK_POLICIES = """
permit (principal in Group::"clerks", action == Action::"start", resource);

permit (principal in Group::"clerks", action == Action::"decide", resource == ApprovalType::"refund")
when { context.decision == "rejected" || (context.draft has quantity && context.draft.quantity <= 2) };

permit (principal in Group::"managers", action, resource);
"""
PRINCIPALS = f"""
[groups]
clerks = ["user:ann", "user:bob"]
managers = ["user:carol"]
bystanders = ["user:dave"]

[telegram]
"user:ann" = {ANN}
"user:carol" = {CAROL}
"user:dave" = {DAVE}
"""


def write_policies(folder: Path, cedar: str = DESK_POLICIES, principals: str = PRINCIPALS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "desk.cedar").write_text(cedar)
    (folder / "principals.toml").write_text(principals)
    return folder


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    return write_policies(tmp_path / "policies")


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


@dataclass
class Desk:
    """The app under the desk's policies, a worker, the fake Bot API and the webhook."""

    h: Harness
    telegram: FakeTelegram
    http: TestClient
    bot: TelegramBot

    def refund(self, quantity: int, **more: Any) -> tuple[str, str]:
        """Start a refund as carol; return its run id and its gate's approval id."""
        run = self.h.start(
            "refund", {"sku": "sku-1", "quantity": quantity, **more}, by="user:carol"
        )
        return run.run_id, self.h.gate(run.run_id).id

    def messages(self, count: int) -> dict[int, BotCall]:
        """The gate's `sendMessage` calls once all `count` are sent, by chat."""
        sent = self.telegram.wait_calls("sendMessage", count)
        return {call.body["chat_id"]: call for call in sent}

    def tap(
        self,
        update_id: int,
        from_id: int,
        message: BotCall,
        button: str,
        *,
        http: TestClient | None = None,
    ) -> Any:
        """Deliver to the webhook the update of `from_id` tapping `button` on `message`, and
        return the webhook's JSON answer."""
        data = FakeTelegram.buttons(message)[button]
        update = callback_update(update_id, from_id=from_id, data=data, message=message)
        answer = (http or self.http).post(
            WEBHOOK_PATH, json=update, headers={SECRET_HEADER: SECRET}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()


def telegram_app(
    policies: Path, telegram: FakeTelegram, token: str | Callable[[], str] = TOKEN
) -> App:
    """The test app with a Telegram notifier, governed by `policies`."""
    holder: list[Policy] = []
    notifier = TelegramNotifier(lambda: holder[0], token, api_base=telegram.url)
    app = make_app(notifiers=[notifier]).with_policies(policies)
    holder.append(app.policy)
    return app


def webhook(h: Harness, telegram: FakeTelegram) -> tuple[FastAPI, TelegramBot]:
    api = create_api(h.client, allowed_hosts=["testserver"])
    bot = TelegramBot(TOKEN, api_base=telegram.url)
    add_telegram_routes(api, h.client, secret_token=SECRET, bot=bot)
    return api, bot


@pytest.fixture
def desk(database_url: str, policies: Path, telegram: FakeTelegram) -> Iterator[Desk]:
    with Harness(telegram_app(policies, telegram), database_url=database_url) as h:
        api, bot = webhook(h, telegram)
        with TestClient(api) as http:
            yield Desk(h, telegram, http, bot)


def sent_for(desk: Desk, approval_id: str) -> None:
    """Wait until the outbox records the gate's Telegram notice as sent."""
    wait_notification(desk.h, approval_id, lambda row: row["sent_at"] is not None)


def wait_notification(
    h: Harness, approval_id: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Wait until the gate's Telegram notification row satisfies `done`, and return it."""
    deadline = time.monotonic() + 10
    while True:
        rows = h.worker.runtime.notifications.status(approval_id)
        if rows and done(rows[0]):
            return rows[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"the Telegram notice of {approval_id} stands at {rows}")
        time.sleep(0.02)


# ---- a gate tells its recipients ---------------------------------------------------------------


def test_a_gate_tells_the_members_allowed_to_decide_with_two_buttons(
    desk: Desk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remit.telegram")
    run_id, approval_id = desk.refund(quantity=5)
    sent_for(desk, approval_id)

    # Ann may reject it (not approve 5), Carol may do anything: both are told. Bob may too but
    # has no Telegram id; Dave may not decide it.
    messages = desk.messages(2)
    assert sorted(messages) == [ANN, CAROL]
    assert len(desk.telegram.calls_of("sendMessage")) == 2
    assert "user:bob has no Telegram id" in caplog.text
    nonces = set()
    for chat, call in messages.items():
        assert call.token == TOKEN
        text = call.body["text"]
        assert text.startswith("Approval waits: Refund 5 x sku-1 at 1200")
        assert f"Run {run_id} (refund), type refund, id {approval_id}" in text
        assert "quantity: 5" in text
        buttons = FakeTelegram.buttons(call)
        assert list(buttons) == ["Approve", "Reject"]
        approve, reject = (decode_callback(buttons[b]) for b in ("Approve", "Reject"))
        assert (approve.approval_id, approve.decision) == (approval_id, "approved")
        assert (reject.approval_id, reject.decision) == (approval_id, "rejected")
        assert approve.nonce == reject.nonce, chat
        nonces.add(approve.nonce)
    assert len(nonces) == 2  # each message its own buttons


def test_an_assigned_gate_tells_only_its_assignee(desk: Desk) -> None:
    _, approval_id = desk.refund(quantity=1, assignee="user:carol")
    sent_for(desk, approval_id)
    assert [call.body["chat_id"] for call in desk.telegram.calls_of("sendMessage")] == [CAROL]
    assert "Assigned to user:carol" in desk.telegram.calls_of("sendMessage")[0].body["text"]


def notice(type: str = "refund", quantity: int = 1, assignee: str | None = None) -> ApprovalNotice:
    return ApprovalNotice(
        approval_id="apr_0123456789abcdef",
        run_id="run_1",
        workflow="refund",
        key="refund",
        type=type,
        title="Refund",
        draft={"sku": "sku-1", "quantity": quantity, "note": ""},
        assignee=assignee,
        created_at=datetime(2026, 3, 1, tzinfo=UTC),
        expires_at=None,
    )


def test_routing_follows_the_assignee_else_the_policies(policies: Path) -> None:
    policy = make_app().with_policies(policies).policy
    assert recipients(notice(quantity=1), policy) == ["user:ann", "user:bob", "user:carol"]
    # Clerks may still reject a large refund, so they get the buttons too; Dave never.
    assert recipients(notice(quantity=50), policy) == ["user:ann", "user:bob", "user:carol"]
    assert recipients(notice(assignee="user:dave"), policy) == ["user:dave"]
    # Only managers may decide a held call.
    assert recipients(notice(type="call"), policy) == ["user:carol"]
    # An app without policies names no one.
    assert recipients(notice(), Policy.open()) == []


def test_a_gate_with_no_one_to_tell_is_logged_once_and_counts_as_sent(
    tmp_path: Path, telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    only_starts = 'permit (principal, action == Action::"start", resource);'
    folder = write_policies(tmp_path / "starts", cedar=only_starts)
    notifier = TelegramNotifier(
        make_app().with_policies(folder).policy, TOKEN, api_base=telegram.url
    )
    with caplog.at_level(logging.WARNING, logger="remit.telegram"):
        notifier.send(notice())
    found = [r for r in caplog.records if r.name == "remit.telegram"]
    assert len(found) == 1
    assert (
        "approval apr_0123456789abcdef (refund) has no one to tell on Telegram" in found[0].message
    )
    # An assignee without a Telegram id: no one reachable, also said once.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="remit.telegram"):
        notifier.send(notice(assignee="user:bob"))
    found = [r for r in caplog.records if r.name == "remit.telegram"]
    assert [r.message for r in found] == [
        "approval apr_0123456789abcdef has no one to tell on Telegram: user:bob has no Telegram "
        "id (add them to principals.toml's [telegram] table)"
    ]
    assert telegram.calls == []


# ---- a tap decides once -------------------------------------------------------------------------


def test_a_tap_decides_once_when_tapped_twice_and_when_delivered_twice(desk: Desk) -> None:
    run_id, approval_id = desk.refund(quantity=1)
    carols = desk.messages(2)[CAROL]

    first = desk.tap(1, CAROL, carols, "Approve")
    assert first["outcome"] == "approved by user:carol"
    # Telegram delivers the same update again: answered at once, nothing done.
    assert desk.tap(1, CAROL, carols, "Approve")["outcome"] == "duplicate: already handled"
    # Carol taps the button again: a new update, the same button, the first decision replayed.
    assert desk.tap(2, CAROL, carols, "Approve")["outcome"] == "approved (replayed) by user:carol"
    # A second server (or this one restarted) gets update 1 again: the decision key replays it.
    api, _ = webhook(desk.h, desk.telegram)
    with TestClient(api) as other:
        again = desk.tap(1, CAROL, carols, "Approve", http=other)
    assert again["outcome"] == "approved (replayed) by user:carol"

    done = desk.h.wait(run_id)
    assert done.status == "done"
    assert done.output["status"] == "approved"
    assert done.attempt == 2
    assert desk.h.fake("shop", FakeShop).orders == 1
    approval = desk.h.approvals.get(approval_id)
    assert (approval.status, approval.decided_by, approval.decided_via) == (
        "approved",
        "user:carol",
        "telegram",
    )
    assert approval.decision_key == f"telegram:{FakeTelegram.buttons(carols)['Approve']}"
    audit = desk.h.approvals.audit(approval_id)
    assert [(row["actor"], row["action"]) for row in audit] == [("user:carol", "approval.approved")]

    answers = [call.body for call in desk.telegram.calls_of("answerCallbackQuery")]
    assert [a["text"] for a in answers] == [
        "Approved as user:carol.",
        "Already approved: this button was tapped before.",
        "Already approved: this button was tapped before.",
    ]
    edits = desk.telegram.calls_of("editMessageText")
    assert edits
    for edit in edits:
        assert (edit.body["chat_id"], edit.body["message_id"]) == (
            CAROL,
            carols.result["message_id"],
        )
        assert edit.body["text"].startswith("Approval approved: Refund 1 x sku-1")
        assert edit.body["text"].endswith("Approved by user:carol via telegram")
        assert "reply_markup" not in edit.body  # the buttons go


def test_a_strangers_tap_is_refused_and_decides_nothing(desk: Desk) -> None:
    run_id, approval_id = desk.refund(quantity=1)
    carols = desk.messages(2)[CAROL]

    outcome = desk.tap(1, 999_999, carols, "Approve")
    assert outcome["outcome"] == "refused: the tapper is not known to this desk"
    [answer] = desk.telegram.calls_of("answerCallbackQuery")
    assert answer.body == {"callback_query_id": "cbq-1", "text": STRANGER, "show_alert": True}
    assert desk.telegram.calls_of("editMessageText") == []
    assert desk.h.approvals.get(approval_id).status == "pending"
    assert desk.h.approvals.audit(approval_id) == []
    assert desk.h.runs.get(run_id).status == "waiting"


def test_a_tap_the_policies_refuse_leaves_the_gate_pending_with_the_reason(desk: Desk) -> None:
    run_id, approval_id = desk.refund(quantity=5)
    anns = desk.messages(2)[ANN]

    # Ann may not approve 5 items.
    outcome = desk.tap(1, ANN, anns, "Approve")
    reason = 'user:ann may not decide ApprovalType::"refund": no policy permits it'
    assert outcome["outcome"] == f"refused: {reason}"
    assert desk.h.approvals.get(approval_id).status == "pending"
    assert desk.h.approvals.audit(approval_id) == []
    [denial] = desk.h.client.services.guard.denials()
    assert (denial.principal, denial.action, denial.resource) == ("user:ann", "decide", "refund")
    assert denial.context["approval"] == approval_id
    [answer] = desk.telegram.calls_of("answerCallbackQuery")
    assert answer.body["text"] == f"Not decided: {reason}"
    assert answer.body["show_alert"] is True
    [edit] = desk.telegram.calls_of("editMessageText")
    assert edit.body["text"].startswith("Approval waits: Refund 5 x sku-1")
    assert edit.body["text"].endswith(f"Not decided: user:ann tapped approved: {reason}")
    assert edit.body["reply_markup"] == anns.body["reply_markup"]  # the buttons stay

    # She may reject it, from the same message.
    assert desk.tap(2, ANN, anns, "Reject")["outcome"] == "rejected by user:ann"
    assert desk.h.wait(run_id).output == {"status": "rejected", "by": "user:ann"}
    # Carol's tap comes too late, and says so.
    carols = desk.messages(2)[CAROL]
    late = desk.tap(3, CAROL, carols, "Approve")
    assert late["outcome"] == "refused: this approval is already rejected by user:ann"
    assert (
        desk.telegram.calls_of("editMessageText")[-1]
        .body["text"]
        .endswith("Rejected by user:ann via telegram")
    )


def test_a_forged_or_missing_secret_gets_401(desk: Desk) -> None:
    _, approval_id = desk.refund(quantity=1)
    carols = desk.messages(2)[CAROL]
    update = callback_update(
        1, from_id=CAROL, data=FakeTelegram.buttons(carols)["Approve"], message=carols
    )
    for headers in ({}, {SECRET_HEADER: "guess"}, {SECRET_HEADER: SECRET + "x"}):
        answer = desk.http.post(WEBHOOK_PATH, json=update, headers=headers)
        assert answer.status_code == 401
        body = answer.json()
        assert set(body) == {"error", "reasons"}
        assert body["reasons"] == []
        assert SECRET_HEADER in body["error"]
    assert desk.h.approvals.get(approval_id).status == "pending"
    assert [call.method for call in desk.telegram.calls] == ["sendMessage"] * 2
    # The genuine update is still handled (a refused one is not remembered).
    assert desk.tap(1, CAROL, carols, "Approve")["outcome"] == "approved by user:carol"


def test_updates_that_are_not_taps_are_answered_200_and_ignored(desk: Desk) -> None:
    headers = {SECRET_HEADER: SECRET}
    message = {"update_id": 7, "message": {"message_id": 1, "text": "hello"}}
    assert desk.http.post(WEBHOOK_PATH, json=message, headers=headers).json() == {
        "ok": True,
        "outcome": "ignored: not a button tap",
    }
    foreign = callback_update(8, from_id=CAROL, data="vote:yes")
    assert desk.http.post(WEBHOOK_PATH, json=foreign, headers=headers).json()["outcome"] == (
        "ignored: not a remit button"
    )
    answer = desk.http.post(WEBHOOK_PATH, content=b"not json", headers=headers)
    assert answer.status_code == 200


# ---- delivery failures and the token --------------------------------------------------------------


def test_the_notifier_raises_on_a_500_and_retries_only_whom_it_missed(
    policies: Path, telegram: FakeTelegram
) -> None:
    policy = make_app().with_policies(policies).policy
    notifier = TelegramNotifier(policy, TOKEN, api_base=telegram.url)
    telegram.fail_next(1)
    with pytest.raises(TelegramError, match=r"not sent on Telegram to 1 of 2: user:ann: .*500"):
        notifier.send(notice())
    assert [c.body["chat_id"] for c in telegram.calls_of("sendMessage", failed=True)] == [ANN]
    assert [c.body["chat_id"] for c in telegram.calls_of("sendMessage")] == [CAROL]
    notifier.send(notice())
    assert [c.body["chat_id"] for c in telegram.calls_of("sendMessage")] == [CAROL, ANN]
    # A refusal by Telegram ({"ok": false}) fails the send too.
    telegram.fail_next(1, ok_false=True)
    with pytest.raises(TelegramError, match="400: Bad Request: told to fail"):
        notifier.send(replace(notice(assignee="user:carol"), approval_id="apr_fedcba9876543210"))


def test_the_notifier_raises_when_telegram_cannot_be_reached(policies: Path) -> None:
    policy = make_app().with_policies(policies).policy
    # Nothing listens on port 1.
    notifier = TelegramNotifier(policy, TOKEN, api_base="http://127.0.0.1:1", timeout=2)
    with pytest.raises(TelegramError) as failed:
        notifier.send(notice())
    assert "no answer from http://127.0.0.1:1" in str(failed.value)
    assert TOKEN not in str(failed.value)


def test_a_failed_notice_is_sent_again_by_the_outbox_with_the_stored_token(
    database_url: str,
    db: Database,
    tmp_path: Path,
    policies: Path,
    telegram: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    app_name = make_app().name
    store = Secrets(db, app_name, SecretKey(file=tmp_path / "secret.key"))
    store.set("TELEGRAM_BOT_TOKEN", TOKEN, by="user:carol")
    app = telegram_app(policies, telegram, token=stored_token(store))
    clock = ManualClock()
    telegram.fail_next(2)  # the attempt's send fails, for both recipients
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 5}, by="user:carol")
        gate = h.gate(run.run_id)
        row = wait_notification(h, gate.id, lambda row: row["error"] is not None)
        assert "TelegramError" in row["error"]
        assert row["sent_at"] is None
        clock.advance(seconds=60)  # past the backoff: the sweep sends it again
        row = wait_notification(h, gate.id, lambda row: row["sent_at"] is not None)
        assert row["attempts"] == 2
        assert row["error"] is None
    assert {c.token for c in telegram.calls} == {TOKEN}
    assert sorted(c.body["chat_id"] for c in telegram.calls_of("sendMessage")) == [ANN, CAROL]
    assert "not sent on Telegram" in caplog.text
    # httpx logs each request's URL: it holds a placeholder, never the token.
    assert "/botTOKEN/sendMessage" in caplog.text
    assert TOKEN not in caplog.text


def test_a_missing_token_says_how_to_store_it(db: Database, tmp_path: Path) -> None:
    token = stored_token(Secrets(db, "shop", SecretKey(file=tmp_path / "secret.key")))
    with pytest.raises(RemitError, match="remit secrets set TELEGRAM_BOT_TOKEN"):
        token()
    assert (
        stored_token(
            Secrets(db, "shop", SecretKey(file=tmp_path / "secret.key")),
            environ={"TELEGRAM_BOT_TOKEN": "from-env"},
        )()
        == "from-env"
    )


# ---- the [telegram] table ------------------------------------------------------------------------


def table_policy(tmp_path: Path, table: str) -> Policy:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "principals.toml").write_text('[groups]\nstaff = ["user:ann"]\n\n' + table)
    return Policy(enabled=True, folder=folder)


def test_the_telegram_table_maps_both_ways(tmp_path: Path) -> None:
    ids = telegram_ids(table_policy(tmp_path, '[telegram]\n"user:ann" = 1\n"agent:bot" = 2\n'))
    assert dict(ids.principals) == {1: "user:ann", 2: "agent:bot"}
    assert dict(ids.ids) == {"user:ann": 1, "agent:bot": 2}
    assert telegram_ids(Policy.open()).principals == {}


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('"user:ann" = "111"', "gives user:ann the id '111': a Telegram user id is a positive"),
        ('"user:ann" = 1.5', "gives user:ann the id 1.5"),
        ('"user:ann" = true', "gives user:ann the id True"),
        ('"user:ann" = -4', "gives user:ann the id -4"),
        ('"user:ann" = 7\n"user:bob" = 7', "gives the id 7 to both user:ann and user:bob"),
        ('"group:staff" = 7', "names 'group:staff', which is not a person or an agent"),
        ('"ann" = 7', "names 'ann', which is not a person or an agent"),
        ('"user:a b" = 7', "`user:a b` is not a principal policies know"),
    ],
)
def test_a_bad_telegram_table_is_refused_naming_the_entry(
    tmp_path: Path, table: str, problem: str
) -> None:
    with pytest.raises(RemitError) as refused:
        telegram_ids(table_policy(tmp_path, "[telegram]\n" + table + "\n"))
    assert "policies/principals.toml: [telegram]" in str(refused.value)
    assert problem in str(refused.value)
