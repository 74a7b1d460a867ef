"""Telegram as an approval channel: a gate's recipients get a message with Approve and Reject
buttons, and a tap decides it through the HTTP webhook (`remit.serve.telegram`).

Four parts live here, none of which needs a server:

- the callback data codec: what a button carries back (`r1:<a|r>:<approval id>:<nonce>`),
  within Telegram's 64 bytes;
- routing: who is told of a gate (its assignee, each member of the group it is assigned to,
  else every member the policies let decide it);
- the `[telegram]` table of `policies/principals.toml`, mapping principals to Telegram user ids:

      [telegram]
      "user:ann" = 111111
      "user:carol" = 333333

- `TelegramBot`, the few Bot API calls remit makes, and `TelegramNotifier`, the notifier
  (`App(notifiers=[...])`) that sends the buttons.

The bot token is a stored secret (`remit secrets set TELEGRAM_BOT_TOKEN`); `stored_token` reads
it as drivers read credentials. No log line or error message holds it.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import tomllib
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from remit.connectors.credentials import Credentials, Secrets
from remit.core.errors import RemitError
from remit.people.notify import ApprovalNotice
from remit.policy.cedar import HELD, PRINCIPALS_FILE, Policy, Principal
from remit.policy.refusals import GROUP_PREFIX

log = logging.getLogger("remit.telegram")

DEFAULT_API_BASE = "https://api.telegram.org"
TOKEN_SECRET = "TELEGRAM_BOT_TOKEN"
# The stored secret Telegram signs each update to the webhook with (`remit telegram
# set-webhook` makes it).
WEBHOOK_SECRET = "TELEGRAM_WEBHOOK_SECRET"
# Telegram's limit on a button's callback data, in bytes.
CALLBACK_LIMIT = 64
CALLBACK_VERSION = "r1"
# The decisions a button makes, by the letter its callback data carries.
_LETTERS: dict[str, Literal["approved", "rejected"]] = {"a": "approved", "r": "rejected"}
_PART = re.compile(r"[A-Za-z0-9_-]+")
# Telegram's limits on a message's text and a callback answer's.
_MESSAGE_LIMIT = 4096
_ANSWER_LIMIT = 200


class TelegramError(RemitError):
    """A Bot API call did not succeed: Telegram refused it, answered with an error, or could not
    be reached. `method` is the Bot API method, `status` the HTTP status where there was one,
    `description` Telegram's own explanation where it gave one. Never holds the bot token."""

    def __init__(
        self,
        message: str,
        *,
        method: str,
        status: int | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__(message)
        self.method = method
        self.status = status
        self.description = description


# ---- callback data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Callback:
    """What an Approve or Reject button carries back: the approval, the decision, and a nonce
    that tells one message's buttons from another's (a tap's decision key is made from it)."""

    approval_id: str
    decision: Literal["approved", "rejected"]
    nonce: str

    def encode(self) -> str:
        """The callback data, `r1:<a|r>:<approval id>:<nonce>`. Raises `RemitError` if it
        would not fit Telegram's 64 bytes, or a part holds a character it may not."""
        return encode_callback(self.approval_id, self.decision, self.nonce)


def new_nonce() -> str:
    """A fresh nonce for one message's buttons: 8 URL-safe characters."""
    return secrets.token_urlsafe(6)


def encode_callback(approval_id: str, decision: str, nonce: str) -> str:
    """Encode a button's callback data. Raises `RemitError` naming what is wrong: an unknown
    decision, a part with a character other than letters, digits, `_` and `-`, or data past
    Telegram's 64 bytes."""
    letter = next((k for k, v in _LETTERS.items() if v == decision), None)
    if letter is None:
        raise RemitError(
            f"a Telegram button decides `approved` or `rejected`, not {decision!r}: "
            "make one button of each"
        )
    for what, value in (("approval id", approval_id), ("nonce", nonce)):
        if not _PART.fullmatch(value):
            raise RemitError(
                f"the {what} {value!r} cannot go in Telegram callback data: use letters, "
                "digits, `_` and `-` only (approval ids look like apr_0123456789abcdef)"
            )
    data = f"{CALLBACK_VERSION}:{letter}:{approval_id}:{nonce}"
    size = len(data.encode())
    if size > CALLBACK_LIMIT:
        room = CALLBACK_LIMIT - (size - len(nonce))
        raise RemitError(
            f"Telegram callback data for approval {approval_id} would be {size} bytes, past "
            f"Telegram's limit of {CALLBACK_LIMIT}: use a nonce of at most {max(room, 0)} "
            "characters (new_nonce() makes 8)"
        )
    return data


def decode_callback(data: str) -> Callback:
    """The button that sent `data`. Raises `RemitError` naming the problem: data past 64 bytes,
    a version this remit does not read, or data that is not `r1:<a|r>:<approval id>:<nonce>`."""
    size = len(data.encode())
    if size > CALLBACK_LIMIT:
        raise RemitError(
            f"Telegram callback data is {size} bytes, past Telegram's limit of "
            f"{CALLBACK_LIMIT}: it was not made by a remit button"
        )
    version, _, rest = data.partition(":")
    if version != CALLBACK_VERSION:
        shown = version if len(version) <= 10 else version[:10] + "…"
        raise RemitError(
            f"Telegram callback data {data!r} has version {shown!r}, which this remit does not "
            f"read (it reads {CALLBACK_VERSION}): the button comes from another remit version or "
            "another bot; decide with `remit approve` / `remit reject`"
        )
    parts = rest.split(":")
    if len(parts) != 3:
        raise RemitError(
            f"Telegram callback data {data!r} is malformed: expected "
            f"{CALLBACK_VERSION}:<a|r>:<approval id>:<nonce>"
        )
    letter, approval_id, nonce = parts
    decision = _LETTERS.get(letter)
    if decision is None:
        raise RemitError(
            f"Telegram callback data {data!r} is malformed: its decision letter {letter!r} is "
            "not `a` (approve) or `r` (reject)"
        )
    if not _PART.fullmatch(approval_id) or not _PART.fullmatch(nonce):
        raise RemitError(
            f"Telegram callback data {data!r} is malformed: the approval id and nonce are "
            "letters, digits, `_` and `-`"
        )
    return Callback(approval_id, decision, nonce)


# ---- who is told, and their Telegram ids ------------------------------------------------------


def decide_context(notice: ApprovalNotice, decision: str) -> dict[str, Any]:
    """What the policies are told of a decision on the notice's gate, in the shape `decide()`
    gives them. A notice does not carry its run's input, so `input` is empty: a policy that
    reads `context.input` decides routing as though the field were absent."""
    context: dict[str, Any] = {
        "decision": decision,
        "workflow": notice.workflow,
        "input": {},
        "draft": dict(notice.draft),
    }
    if notice.type == HELD:  # a held direct call: its op, and the op's input
        context["op"] = notice.draft.get("op", "")
        context["call"] = notice.draft.get("input") or {}
    return context


def recipients(notice: ApprovalNotice, policy: Policy) -> list[str]:
    """The principals to tell of a gate: its assignee if it is one principal; else each member
    of the group it is assigned to (`group:<name>`), or with no assignee each member of the
    policies' groups, that the policies let approve or reject it (one who may only reject
    still gets the buttons). An app without policies names no members, so no one."""
    if notice.assignee and not notice.assignee.startswith(GROUP_PREFIX):
        return [notice.assignee]
    members = (
        sorted(policy.groups.get(notice.assignee.removeprefix(GROUP_PREFIX), ()))
        if notice.assignee
        else policy.members
    )
    return [
        member
        for member in members
        if any(
            policy.check(member, "decide", notice.type, decide_context(notice, decision)).allowed
            for decision in ("approved", "rejected")
        )
    ]


@dataclass(frozen=True)
class TelegramIds:
    """The `[telegram]` table both ways: Telegram user id to principal, and back."""

    principals: Mapping[int, str]
    ids: Mapping[str, int]

    def principal(self, telegram_id: int) -> str | None:
        return self.principals.get(telegram_id)

    def id_of(self, principal: str) -> int | None:
        return self.ids.get(principal)


def telegram_ids(policy: Policy) -> TelegramIds:
    """Read the `[telegram]` table of the policies' `principals.toml`. An app without policies,
    or a file without the table, maps no one. Raises `RemitError` naming the file and the entry
    to fix: an id that is not a positive whole number, one id given to two principals, or a
    principal that is not `user:<name>` or `agent:<name>`."""
    if policy.folder is None:
        return TelegramIds({}, {})
    path = policy.folder / PRINCIPALS_FILE
    name = f"{policy.folder.name}/{PRINCIPALS_FILE}"
    try:
        declared = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return TelegramIds({}, {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise RemitError(f"{name} cannot be read for its [telegram] table: {error}") from None
    table = declared.get("telegram", {})
    if not isinstance(table, dict):
        raise RemitError(
            f'{name}: [telegram] must be a table of principals and Telegram user ids, e.g. "user:ann" = 111111'
        )
    principals: dict[int, str] = {}
    ids: dict[str, int] = {}
    for who, value in table.items():
        if not who.startswith(("user:", "agent:")):
            raise RemitError(
                f"{name}: [telegram] names {who!r}, which is not a person or an agent: write "
                'it as "user:<name>" or "agent:<name>"'
            )
        try:
            Principal.parse(who)
        except RemitError as error:
            raise RemitError(f"{name}: [telegram]: {error}") from None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RemitError(
                f"{name}: [telegram] gives {who} the id {value!r}: a Telegram user id is a "
                f'positive whole number, unquoted, e.g. "{who}" = 111111'
            )
        if value in principals:
            raise RemitError(
                f"{name}: [telegram] gives the id {value} to both {principals[value]} and "
                f"{who}: one Telegram account acts as one principal; remove one"
            )
        principals[value] = who
        ids[who] = value
    return TelegramIds(principals, ids)


# ---- the Bot API ------------------------------------------------------------------------------


def stored_token(
    store: Secrets, *, environ: Mapping[str, str] | None = None, name: str = TOKEN_SECRET
) -> Callable[[], str]:
    """The bot token as a callable, read as a driver reads a credential: `environ` (when it
    sets `name`) over the app's stored secret, kept for a few seconds. Build a notifier or bot
    from a client with `stored_token(client.services.secrets)`. The callable raises `RemitError` saying
    how to store the token when there is none."""
    credentials = Credentials(store, environ or {})

    def token() -> str:
        value = credentials.get(name)
        if not value:
            raise RemitError(
                f"the Telegram bot token is not stored: store it with `remit secrets set {name}` "
                f"(BotFather gives it), or set the environment variable {name}"
            )
        return value

    return token


class TelegramBot:
    """The Bot API calls remit makes: `sendMessage`, `answerCallbackQuery`, `editMessageText`
    and `setWebhook`, POSTed as JSON to `{api_base}/bot{token}/{method}`.

    `token` is the token or a callable returning it (`stored_token(client.services.secrets)`), read on
    each call. `api_base` and `transport` are what a test points at a fake
    (`remit.serve.fake_telegram`). Each call returns Telegram's `result`, or raises
    `TelegramError`: on a non-2xx answer, an answer with `"ok": false`, or no answer at all.
    """

    def __init__(
        self,
        token: str | Callable[[], str],
        *,
        api_base: str = DEFAULT_API_BASE,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._token = token
        self.api_base = api_base.rstrip("/")
        inner = transport if transport is not None else httpx.HTTPTransport()
        self._client = httpx.Client(timeout=timeout, transport=_TokenTransport(inner))

    def __repr__(self) -> str:
        return f"<TelegramBot at {self.api_base}: token not shown>"

    def close(self) -> None:
        self._client.close()

    def call(self, method: str, payload: Mapping[str, Any]) -> Any:
        """Call Bot API `method` with `payload`; return its `result`."""
        token = self._token() if callable(self._token) else self._token
        # The URL the client sees (and httpx logs) holds a placeholder; the transport puts the
        # token in as the request leaves.
        url = f"{self.api_base}/bot{_HIDDEN}/{method}"
        try:
            answer = self._client.post(url, json=dict(payload), extensions={_TOKEN: token})
        except httpx.HTTPError as error:
            detail = str(error).replace(token, "<token>") if token else str(error)
            raise TelegramError(
                f"Telegram {method}: no answer from {self.api_base} "
                f"({type(error).__name__}: {detail}); it is tried again later",
                method=method,
            ) from None
        try:
            body = answer.json()
        except ValueError:
            body = None
        description = body.get("description") if isinstance(body, dict) else None
        if not answer.is_success or not (isinstance(body, dict) and body.get("ok") is True):
            said = f": {description}" if description else ""
            raise TelegramError(
                f"Telegram {method} answered {answer.status_code}{said}",
                method=method,
                status=answer.status_code,
                description=description,
            )
        return body.get("result")

    def send_message(
        self, chat_id: int, text: str, *, reply_markup: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Send `text` to a chat (a person's own chat has their user id); returns the message."""
        payload: dict[str, Any] = {"chat_id": chat_id, "text": _clip(text, _MESSAGE_LIMIT)}
        if reply_markup is not None:
            payload["reply_markup"] = dict(reply_markup)
        result = self.call("sendMessage", payload)
        return result if isinstance(result, dict) else {}

    def answer_callback_query(
        self, callback_query_id: str, text: str = "", *, show_alert: bool = False
    ) -> None:
        """Answer a button tap: Telegram shows `text` to the person who tapped."""
        payload: dict[str, Any] = {"callback_query_id": callback_query_id}
        if text:
            payload["text"] = _clip(text, _ANSWER_LIMIT)
        if show_alert:
            payload["show_alert"] = True
        self.call("answerCallbackQuery", payload)

    def edit_message_text(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> None:
        """Replace a message's text; without `reply_markup` its buttons go."""
        payload: dict[str, Any] = {
            "chat_id": chat_id,
            "message_id": message_id,
            "text": _clip(text, _MESSAGE_LIMIT),
        }
        if reply_markup is not None:
            payload["reply_markup"] = dict(reply_markup)
        self.call("editMessageText", payload)

    def set_webhook(
        self,
        url: str,
        *,
        secret_token: str,
        allowed_updates: tuple[str, ...] = ("callback_query",),
    ) -> None:
        """Have Telegram POST updates to `url`, with `secret_token` in the
        `X-Telegram-Bot-Api-Secret-Token` header (the webhook refuses any request without it)."""
        self.call(
            "setWebhook",
            {"url": url, "secret_token": secret_token, "allowed_updates": list(allowed_updates)},
        )


# What stands for the token in a request's URL until it is sent, and the request extension that
# carries the token to the transport.
_HIDDEN = "TOKEN"
_TOKEN = "remit.telegram.token"


class _TokenTransport(httpx.BaseTransport):
    """Puts the bot token into a request's URL as it is sent, so that the URL httpx logs (and
    any request an error keeps) holds only the placeholder."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        token = request.extensions.get(_TOKEN, "")
        path = request.url.raw_path.replace(
            f"/bot{_HIDDEN}/".encode(), f"/bot{urllib.parse.quote(token, safe=':')}/".encode(), 1
        )
        extensions = {k: v for k, v in request.extensions.items() if k != _TOKEN}
        sent = httpx.Request(
            request.method,
            request.url.copy_with(raw_path=path),
            headers=request.headers,
            stream=request.stream,
            extensions=extensions,
        )
        return self.inner.handle_request(sent)

    def close(self) -> None:
        self.inner.close()


def _clip(text: str, longest: int) -> str:
    return text if len(text) <= longest else text[: longest - 1] + "…"


def keyboard(approval_id: str, nonce: str) -> dict[str, Any]:
    """The inline keyboard of one message: Approve and Reject, side by side."""
    return {
        "inline_keyboard": [
            [
                {
                    "text": "Approve",
                    "callback_data": encode_callback(approval_id, "approved", nonce),
                },
                {
                    "text": "Reject",
                    "callback_data": encode_callback(approval_id, "rejected", nonce),
                },
            ]
        ]
    }


def notice_text(notice: ApprovalNotice, *, heading: str = "Approval waits") -> str:
    """A gate's message: its title, run, type, assignee, expiry and draft, as plain text."""
    lines = [
        f"{heading}: {notice.title}",
        f"Run {notice.run_id} ({notice.workflow}), type {notice.type}, id {notice.approval_id}",
    ]
    if notice.assignee:
        lines.append(f"Assigned to {notice.assignee}")
    if notice.expires_at is not None:
        lines.append(f"Expires {notice.expires_at.isoformat(timespec='minutes')}")
    if notice.draft:
        lines.append("")
        lines += [f"{field}: {_clip(str(value), 300)}" for field, value in notice.draft.items()]
    return "\n".join(lines)


class TelegramNotifier:
    """Tells a gate's recipients on Telegram, each in their own chat, with Approve and Reject
    buttons. Recipients are chosen by `recipients` and reached through the `[telegram]` table
    of the policies' `principals.toml`; one without a Telegram id is skipped.

    `policy` is the app's `Policy`, or a callable returning it (an app governed by policies
    only once it is built: `lambda: app.policy`). `token` is the bot token or a callable
    returning it (`stored_token(client.services.secrets)`).

    `send` raises when any recipient was not reached, so the outbox tries again; a recipient
    this process already reached with the notice is not sent it again. A gate with no one to
    tell is logged (`remit.telegram`) and counts as sent.
    """

    name = "telegram"

    def __init__(
        self,
        policy: Policy | Callable[[], Policy],
        token: str | Callable[[], str],
        *,
        api_base: str = DEFAULT_API_BASE,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._policy = policy
        self.bot = TelegramBot(token, api_base=api_base, transport=transport, timeout=timeout)
        # (approval id, Telegram id) pairs reached, so a retry sends only to the rest.
        self._reached: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def policy(self) -> Policy:
        return self._policy if isinstance(self._policy, Policy) else self._policy()

    def send(self, notice: ApprovalNotice) -> None:
        policy = self.policy
        to = recipients(notice, policy)
        if not to:
            log.warning(
                "approval %s (%s) has no one to tell on Telegram: the policies let no member "
                "of %s decide it",
                notice.approval_id,
                notice.type,
                notice.assignee or "principals.toml's groups",
            )
            return
        ids = telegram_ids(policy)
        reachable = [(who, ids.id_of(who)) for who in to]
        skipped = [who for who, chat in reachable if chat is None]
        if skipped:
            log.info(
                "approval %s: %s %s no Telegram id in principals.toml's [telegram] table; "
                "not told on Telegram",
                notice.approval_id,
                ", ".join(skipped),
                "has" if len(skipped) == 1 else "have",
            )
        chats = [chat for _, chat in reachable if chat is not None]
        if not chats:
            log.warning(
                "approval %s has no one to tell on Telegram: %s %s no Telegram id (add them "
                "to principals.toml's [telegram] table)",
                notice.approval_id,
                ", ".join(to),
                "has" if len(to) == 1 else "have",
            )
            return
        text = notice_text(notice)
        failed: list[str] = []
        for chat in chats:
            if self._was_reached(notice.approval_id, chat):
                continue
            try:
                self.bot.send_message(
                    chat, text, reply_markup=keyboard(notice.approval_id, new_nonce())
                )
            except TelegramError as error:
                failed.append(f"{ids.principal(chat)}: {error}")
                continue
            self._mark_reached(notice.approval_id, chat)
        if failed:
            raise TelegramError(
                f"approval {notice.approval_id} was not sent on Telegram to "
                f"{len(failed)} of {len(chats)}: {'; '.join(failed)}",
                method="sendMessage",
            )

    def _was_reached(self, approval_id: str, chat: int) -> bool:
        with self._lock:
            return (approval_id, chat) in self._reached

    def _mark_reached(self, approval_id: str, chat: int) -> None:
        with self._lock:
            self._reached[(approval_id, chat)] = None
            while len(self._reached) > 10_000:
                self._reached.popitem(last=False)
