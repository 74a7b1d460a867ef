"""A fake Telegram Bot API: a real HTTP server on 127.0.0.1 that records every call and answers
as Telegram would, for tests and the demo.

    from remit.people.telegram import TelegramBot, TelegramNotifier
    from remit.serve.fake_telegram import FakeTelegram, callback_update
    from remit.serve.telegram import SECRET_HEADER, add_telegram_routes

    with FakeTelegram() as telegram:
        notifier = TelegramNotifier(lambda: app.policy, "123:abc", api_base=telegram.url)
        bot = TelegramBot("123:abc", api_base=telegram.url)
        add_telegram_routes(api, client, secret_token="s3cret", bot=bot)
        ...                                       # a gate opens; the notifier sends to the fake
        sent = telegram.wait_calls("sendMessage")[0]
        sent.token, sent.body["chat_id"]          # "123:abc", 111111
        data = telegram.buttons(sent)["Approve"]  # the Approve button's callback data
        update = callback_update(1, from_id=111111, data=data, message=sent)
        httpx.post(f"{server}/telegram/webhook", json=update,   # as Telegram would
                   headers={SECRET_HEADER: "s3cret"})
        telegram.calls_of("editMessageText")      # the message now says who decided
        telegram.fail_next(2)                     # the next two calls answer 500

It accepts `POST /bot<token>/<method>` with a JSON (or form) body and answers
`{"ok": true, "result": ...}`: a message (with a fresh `message_id`) for `sendMessage` and
`editMessageText`, `true` for the rest. `fail_next(n)` makes the next n calls fail, with a 500
or, with `ok_false=True`, a 400 `{"ok": false, ...}` as Telegram refuses a call. Every call is
recorded, failed ones too (`calls`, `calls_of(method)`), under a lock: the server answers each
request on a thread of its own.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class BotCall:
    """One call the fake received: the Bot API method, the token in its path, its body,
    whether the fake failed it, and the result it answered with."""

    method: str
    token: str
    body: dict[str, Any]
    failed: bool = False
    # What the fake answered with as `result` (a sent message, with its `message_id`).
    result: Any = None


class FakeTelegram:
    """A fake Bot API server in a daemon thread. Use it as a context manager, or call `close`.

    `url` is its base (`http://127.0.0.1:<port>`), to give as `api_base`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[BotCall] = []
        self._failures: list[bool] = []  # one per call still to fail: True answers ok=false
        self._message_ids = itertools.count(1001)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-telegram", daemon=True
        )
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    def __enter__(self) -> FakeTelegram:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # What the test sees and sets.

    @property
    def calls(self) -> list[BotCall]:
        """Every call received so far, in order."""
        with self._lock:
            return list(self._calls)

    def calls_of(self, method: str, *, failed: bool = False) -> list[BotCall]:
        """The calls of one method, the ones answered with success (or, `failed`, the others)."""
        return [call for call in self.calls if call.method == method and call.failed == failed]

    def wait_calls(self, method: str, count: int = 1, *, timeout: float = 10.0) -> list[BotCall]:
        """Wait until at least `count` successful calls of `method` arrived, and return them.
        Raises `TimeoutError` saying how many did."""
        deadline = time.monotonic() + timeout
        while len(found := self.calls_of(method)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the fake Telegram got {len(found)} {method} calls in {timeout:g}s, not "
                    f"{count}: is the notifier's api_base {self.url}?"
                )
            time.sleep(0.02)
        return found

    def fail_next(self, count: int = 1, *, ok_false: bool = False) -> None:
        """Fail the next `count` calls: answer 500, or with `ok_false` a 400 with
        `{"ok": false, ...}` (a call Telegram refuses)."""
        with self._lock:
            self._failures.extend([ok_false] * count)

    def clear(self) -> None:
        """Forget the calls recorded so far."""
        with self._lock:
            self._calls.clear()

    @staticmethod
    def buttons(call: BotCall) -> dict[str, str]:
        """A sent message's inline buttons: each button's text to its callback data."""
        markup = call.body.get("reply_markup") or {}
        if isinstance(markup, str):
            markup = json.loads(markup)
        return {
            button["text"]: button["callback_data"]
            for row in markup.get("inline_keyboard", [])
            for button in row
            if "callback_data" in button
        }

    # The server's side.

    def _answer(self, method: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
            message_id = next(self._message_ids)
            status, answer = self._reply_to(method, body, failure, message_id)
            self._calls.append(
                BotCall(
                    method, token, body, failed=failure is not None, result=answer.get("result")
                )
            )
        return status, answer

    def _reply_to(
        self, method: str, body: dict[str, Any], failure: bool | None, message_id: int
    ) -> tuple[int, dict[str, Any]]:
        if failure is True:
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: told to fail"}
        if failure is False:
            return 500, {"ok": False, "error_code": 500, "description": "Internal Server Error"}
        if method == "sendMessage":
            return 200, {"ok": True, "result": self._message(message_id, body)}
        if method == "editMessageText":
            return 200, {"ok": True, "result": self._message(body.get("message_id", 0), body)}
        if method == "getMe":
            bot = {"id": 999_000, "is_bot": True, "first_name": "remit", "username": "remit_bot"}
            return 200, {"ok": True, "result": bot}
        return 200, {"ok": True, "result": True}

    @staticmethod
    def _message(message_id: Any, body: dict[str, Any]) -> dict[str, Any]:
        chat_id = body.get("chat_id", 0)
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "text": body.get("text", ""),
        }
        if body.get("reply_markup"):
            message["reply_markup"] = body["reply_markup"]
        return message


def _handler(fake: FakeTelegram) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            if len(parts) != 2 or not parts[0].startswith("bot") or not parts[1]:
                self._reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                return
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            body: Any
            if "json" in (self.headers.get("content-type") or ""):
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = None
            else:
                body = dict(urllib.parse.parse_qsl(raw))
            if not isinstance(body, dict):
                bad = {"ok": False, "error_code": 400, "description": "Bad Request: not JSON"}
                self._reply(400, bad)
                return
            status, answer = fake._answer(parts[1], parts[0].removeprefix("bot"), body)
            self._reply(status, answer)

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the calls are recorded, and a path holds the token

    return Handler


def callback_update(
    update_id: int,
    *,
    from_id: int,
    data: str,
    message: BotCall | None = None,
    callback_id: str | None = None,
) -> dict[str, Any]:
    """The update Telegram sends a webhook when `from_id` taps a button carrying `data` on
    `message`, a `sendMessage` call the fake answered (its chat, id, text and buttons)."""
    sent: dict[str, Any] = {"message_id": 0, "chat": {"id": from_id, "type": "private"}}
    if message is not None and isinstance(message.result, dict):
        sent = dict(message.result)
    return {
        "update_id": update_id,
        "callback_query": {
            "id": callback_id or f"cbq-{update_id}",
            "from": {"id": from_id, "is_bot": False, "first_name": f"user {from_id}"},
            "chat_instance": str(from_id),
            "message": sent,
            "data": data,
        },
    }
