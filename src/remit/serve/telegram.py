"""The Telegram webhook: a tap on a gate's Approve or Reject button decides it.

    api = create_api(client)
    bot = TelegramBot(stored_token(client.services.secrets))
    add_telegram_routes(api, client, secret_token=secret, bot=bot)
    bot.set_webhook("https://desk.example/telegram/webhook", secret_token=secret)

`POST /telegram/webhook` takes Telegram's updates. A request without the secret token given to
`setWebhook` (header `X-Telegram-Bot-Api-Secret-Token`) is refused with 401. A button tap
(`callback_query`) is decided as the principal the `[telegram]` table of `principals.toml` maps
the tapper's Telegram id to, through `client.approvals.decide(..., via="telegram")`, so the policies,
the assignee rule and the audit apply as on every other surface. Someone the table does not
name decides nothing.

A tap decides once: its decision key is made from the button's callback data
(`telegram:<callback data>`), so a second tap on the same button, and an update Telegram
delivers again (to this server after a restart, or to another), replay the first decision. A
bounded set of recent `update_id`s answers a repeated update without asking the database.

Every update handled is answered 200, whatever came of it (Telegram sends again any update
answered otherwise); the tapper is told through `answerCallbackQuery`, and the message is
edited to say who decided and how, or why nothing was decided. A tap on a gate withdrawn
meanwhile by whoever asked for it decides nothing: the tapper is told it was withdrawn, and by
whom, and the message loses its buttons. An error reaching the database is not handled:
Telegram sends the update again.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections import OrderedDict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from remit.client import Client
from remit.core.errors import (
    ApprovalNotFound,
    DecisionRefused,
    RemitError,
    RunNotFound,
)
from remit.people.notify import ApprovalNotice
from remit.people.telegram import (
    Callback,
    TelegramBot,
    TelegramError,
    TelegramIds,
    decode_callback,
    notice_text,
    telegram_ids,
)
from remit.policy.cedar import PolicyDenied

log = logging.getLogger("remit.telegram")

WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
VIA = "telegram"
STRANGER = "You are not known to this desk: nothing was decided."


def add_telegram_routes(
    api: FastAPI,
    client: Client,
    *,
    secret_token: str,
    bot: TelegramBot,
    remember: int = 1024,
) -> None:
    """Add `POST /telegram/webhook` to `api`, deciding taps on `client`'s app as the principals
    its `[telegram]` table names, and answering them through `bot`.

    `secret_token` is the one given to `setWebhook`. The `[telegram]` table is read now, so a
    bad one stops the server from starting (`RemitError` naming the entry). `remember` is how
    many recent update ids are kept to answer a repeated update at once.
    """
    if not secret_token:
        raise RemitError(
            "the Telegram webhook needs a secret token (1 to 256 of A-Z a-z 0-9 _ -): pass the "
            "one given to setWebhook as secret_token"
        )
    desk = _Desk(client, bot, telegram_ids(client.app.policy), remember)
    expected = secret_token.encode()

    @api.post(WEBHOOK_PATH, include_in_schema=False)
    async def telegram_webhook(request: Request) -> JSONResponse:
        given = request.headers.get(SECRET_HEADER)
        if given is None or not hmac.compare_digest(given.encode(), expected):
            what = "has no" if given is None else "has a wrong"
            log.warning("telegram webhook: a request from %s %s secret token", _peer(request), what)
            return _refused(
                f"the request {what} {SECRET_HEADER} header: send the secret token given to "
                "setWebhook"
            )
        raw = await request.body()
        try:
            update = json.loads(raw)
        except ValueError:
            update = None
        if not isinstance(update, dict):
            log.warning("telegram webhook: an update that is not a JSON object was ignored")
            return JSONResponse({"ok": True, "outcome": "ignored: not a JSON object"})
        outcome = await run_in_threadpool(desk.handle, update)
        return JSONResponse({"ok": True, "outcome": outcome})


def _refused(message: str) -> JSONResponse:
    """A 401 in the API's error shape (`ErrorBody` in `api.py`)."""
    return JSONResponse({"error": message, "reasons": []}, status_code=401)


def _peer(request: Request) -> str:
    return request.client.host if request.client else "an unknown address"


class _Recent:
    """The last `size` update ids handled, to answer a repeated update at once."""

    def __init__(self, size: int) -> None:
        self.size = max(size, 1)
        self._ids: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, update_id: int) -> bool:
        with self._lock:
            return update_id in self._ids

    def add(self, update_id: int) -> None:
        with self._lock:
            self._ids[update_id] = None
            self._ids.move_to_end(update_id)
            while len(self._ids) > self.size:
                self._ids.popitem(last=False)


class _Desk:
    """What the webhook does with one update: decide a tap, tell the tapper, edit the message."""

    def __init__(self, client: Client, bot: TelegramBot, ids: TelegramIds, remember: int) -> None:
        self.client = client
        self.bot = bot
        self.ids = ids
        self.recent = _Recent(remember)

    def handle(self, update: dict[str, Any]) -> str:
        """Handle one update and say what came of it. An update id handled before is not
        handled again; one whose handling raised is not remembered, so Telegram's next
        delivery of it is handled."""
        given = update.get("update_id")
        update_id = given if isinstance(given, int) and not isinstance(given, bool) else None
        if update_id is not None and update_id in self.recent:
            return "duplicate: already handled"
        outcome = self._handle(update)
        if update_id is not None:
            self.recent.add(update_id)
        return outcome

    def _handle(self, update: dict[str, Any]) -> str:
        query = update.get("callback_query")
        if not isinstance(query, dict):
            return "ignored: not a button tap"
        query_id = str(query.get("id", ""))
        data = query.get("data")
        sender = query.get("from")
        from_id = sender.get("id") if isinstance(sender, dict) else None
        message = query.get("message") if isinstance(query.get("message"), dict) else None
        try:
            if not isinstance(data, str):
                raise RemitError("the tap carries no callback data")
            callback = decode_callback(data)
        except RemitError as error:
            log.warning("telegram: a tap by Telegram user %s was ignored: %s", from_id, error)
            self._answer(query_id, "This button is not one this desk reads.", alert=True)
            return "ignored: not a remit button"
        principal = None
        if isinstance(from_id, int) and not isinstance(from_id, bool):
            principal = self.ids.principal(from_id)
        if principal is None:
            log.warning(
                "telegram: Telegram user %s, whom principals.toml's [telegram] table does not "
                "name, tapped %s on approval %s: refused, nothing decided",
                from_id,
                callback.decision,
                callback.approval_id,
            )
            self._answer(query_id, STRANGER, alert=True)
            return "refused: the tapper is not known to this desk"
        try:
            result = self.client.approvals.decide(
                [callback.approval_id],
                callback.decision,
                key=f"telegram:{data}",
                by=principal,
                via=VIA,
            )
        except DecisionRefused as refused:
            why = "; ".join(_reason(reason) for _, reason in refused.reasons)
            return self._refused(query_id, message, callback, principal, why)
        except (PolicyDenied, ApprovalNotFound) as error:
            return self._refused(query_id, message, callback, principal, str(error))
        done = _DONE[callback.decision]
        if result.replayed:
            self._answer(query_id, f"Already {done.lower()}: this button was tapped before.")
        else:
            self._answer(query_id, f"{done} as {principal}.")
        self._edit(message, callback)
        return f"{callback.decision}{' (replayed)' if result.replayed else ''} by {principal}"

    def _refused(
        self,
        query_id: str,
        message: dict[str, Any] | None,
        callback: Callback,
        principal: str,
        why: str,
    ) -> str:
        log.info(
            "telegram: %s's tap (%s) on approval %s was refused: %s",
            principal,
            callback.decision,
            callback.approval_id,
            why,
        )
        self._answer(query_id, f"Not decided: {why}", alert=True)
        self._edit(message, callback, refused=f"{principal} tapped {callback.decision}: {why}")
        return f"refused: {why}"

    def _answer(self, query_id: str, text: str, *, alert: bool = False) -> None:
        if not query_id:
            return
        try:
            self.bot.answer_callback_query(query_id, text, show_alert=alert)
        except RemitError as error:  # Telegram failed, or the token is not stored
            log.warning("telegram: answering a tap failed: %s", error)

    def _edit(
        self, message: dict[str, Any] | None, callback: Callback, *, refused: str | None = None
    ) -> None:
        """Show on the message how its gate stands: decided (who, how; its buttons go) or, after
        a refused tap, still pending with why the tap decided nothing (its buttons stay)."""
        if message is None:
            return
        chat = message.get("chat")
        chat_id = chat.get("id") if isinstance(chat, dict) else None
        message_id = message.get("message_id")
        if not isinstance(chat_id, int) or not isinstance(message_id, int):
            return
        text, keep = self._text(message, callback, refused)
        markup = message.get("reply_markup") if keep else None
        try:
            self.bot.edit_message_text(
                chat_id,
                message_id,
                text,
                reply_markup=markup if isinstance(markup, dict) else None,
            )
        except RemitError as error:  # Telegram failed, or the token is not stored
            description = error.description if isinstance(error, TelegramError) else None
            if description and "not modified" in description:
                return  # the message already says so (a second tap)
            log.warning(
                "telegram: editing the message of approval %s failed: %s",
                callback.approval_id,
                error,
            )

    def _text(
        self, message: dict[str, Any], callback: Callback, refused: str | None
    ) -> tuple[str, bool]:
        """The message's new text, and whether its buttons stay."""
        try:
            approval = self.client.services.approvals.get(callback.approval_id)
        except ApprovalNotFound:
            original = str(message.get("text", ""))
            return f"{original}\n\nNot decided: {refused}", False
        try:
            workflow = self.client.runs.get(approval.run_id).workflow
        except RunNotFound:
            workflow = "?"
        notice = ApprovalNotice(
            approval_id=approval.id,
            run_id=approval.run_id,
            workflow=workflow,
            key=approval.key,
            type=approval.type,
            title=approval.title,
            draft=approval.edited_draft_json or approval.draft_json,
            assignee=approval.assignee,
            created_at=approval.created_at,
            expires_at=approval.expires_at,
        )
        if approval.status == "pending":
            body = notice_text(notice)
            return f"{body}\n\nNot decided: {refused}" if refused else body, True
        done = _DONE.get(approval.status, approval.status.capitalize())
        how = f"{done} by {approval.decided_by} via {approval.decided_via}"
        if approval.reason:
            how += f": {approval.reason}"
        return f"{notice_text(notice, heading=f'Approval {approval.status}')}\n\n{how}", False


_DONE = {"approved": "Approved", "rejected": "Rejected", "withdrawn": "Withdrawn"}


def _reason(reason: str) -> str:
    """One of `decide()`'s reasons as a sentence of its own: those about the approval start
    with a verb (`is already approved by user:carol`)."""
    first = reason.split(" ", 1)[0]
    return f"this approval {reason}" if first in ("is", "belongs", "has") else reason
