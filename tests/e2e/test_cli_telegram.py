"""Telegram as an approval channel, end to end on the example desk and a fake Bot API: the
admin stores the bot token and registers the webhook, a worker sends the write-off's gate to
ann and carol with Approve and Reject buttons, and her tap, delivered twice to `remit serve`, decides the
gate once, as her."""

from __future__ import annotations

import re
import time

import httpx
import sqlalchemy as sa

from remit.core.schema import approvals, audit
from remit.serve.fake_telegram import FakeTelegram, callback_update
from remit.serve.telegram import SECRET_HEADER, WEBHOOK_PATH
from tests.e2e.cli_support import Cli


def _listening(cli: Cli, index: int) -> str:
    deadline = time.monotonic() + 60
    while not (found := re.search(r"on (http://127\.0\.0\.1:\d+)", cli.log(index))):
        assert time.monotonic() < deadline, cli.log(index)
        time.sleep(0.05)
    return found.group(1)


def test_a_tap_on_telegram_decides_the_gate_once_as_the_tapper(cli: Cli) -> None:
    with FakeTelegram() as telegram:
        cli.env["REMIT_TELEGRAM_API"] = telegram.url
        cli("secrets", "set", "TELEGRAM_BOT_TOKEN", "--as", "user:sam", stdin="123:bot-token")
        server = cli.spawn("serve", "--port", "0")
        url = _listening(cli, 0)
        # Not yet: the webhook's secret is made by set-webhook.
        assert "Telegram taps are not taken" in cli.log(0)
        registered = cli("telegram", "set-webhook", f"{url}{WEBHOOK_PATH}", "--as", "user:sam")
        assert "Telegram sends taps to" in registered.stdout
        (hook,) = telegram.calls_of("setWebhook")
        assert hook.token == "123:bot-token"
        secret = hook.body["secret_token"]
        server.kill()
        server.wait(10)
        cli.spawn("serve", "--port", "0")  # log 1: now with the webhook
        url = _listening(cli, 1)
        cli.worker()  # log 2

        run_id = cli(
            "start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}'
        ).stdout.strip()
        # Both may decide it: carol may approve it, ann (a clerk) only reject it.
        messages = telegram.wait_calls("sendMessage", count=2, timeout=60)
        assert sorted(call.body["chat_id"] for call in messages) == [111111, 333333]
        (sent,) = [call for call in messages if call.body["chat_id"] == 333333]
        approve = telegram.buttons(sent)["Approve"]
        update = callback_update(7001, from_id=333333, data=approve, message=sent)
        with httpx.Client(base_url=url, timeout=10) as http:
            forged = http.post(WEBHOOK_PATH, json=update, headers={SECRET_HEADER: "guess"})
            assert forged.status_code == 401
            for _ in range(2):  # Telegram delivers an update again when unsure
                tapped = http.post(WEBHOOK_PATH, json=update, headers={SECRET_HEADER: secret})
                assert tapped.status_code == 200
        cli.wait_for(run_id, "done")
    with cli.db.engine.connect() as conn:
        (gate,) = conn.execute(sa.select(approvals)).all()
        rows = conn.execute(sa.select(audit.c.action).where(audit.c.target == gate.id)).all()
    assert (gate.status, gate.decided_by, gate.decided_via) == (
        "approved",
        "user:carol",
        "telegram",
    )
    assert [row.action for row in rows] == ["approval.approved"]
    assert "by user:carol" in telegram.calls_of("editMessageText")[-1].body["text"]
