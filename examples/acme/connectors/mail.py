"""The mail connector: transactional email through a Postmark-shaped API.

`POST /email` with the server token in `X-Postmark-Server-Token`. The API takes no idempotency
key, so sending is a non-idempotent write: remit never repeats one whose outcome is unknown.
The connector's scenario steps read the fake's outbox: who got how many emails, and what the
last one said.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import BaseModel

from remit import CallContext, Connector, Driver, DriverError, Fake, implements, op, steps


class Message(BaseModel):
    to: str
    subject: str
    body: str


class Sent(BaseModel):
    message_id: str
    to: str


send_message = op(
    "mail.messages.send",
    effect="write",
    idempotent=False,
    input=Message,
    output=Sent,
    description="Send one email.",
)


class MailDriver(Driver):
    """The live mail API. Needs `MAIL_SERVER_TOKEN` and `MAIL_FROM`."""

    credentials = ("MAIL_SERVER_TOKEN", "MAIL_FROM")

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = os.environ.get("MAIL_API_BASE", "https://api.mail.example")
        self.transport = transport

    @implements(send_message)
    def send(self, input: Message, call: CallContext) -> Sent:
        headers = {
            "X-Postmark-Server-Token": call.credential("MAIL_SERVER_TOKEN"),
            "Accept": "application/json",
        }
        payload = {
            "From": call.credential("MAIL_FROM"),
            "To": input.to,
            "Subject": input.subject,
            "TextBody": input.body,
            "Metadata": {"remit_key": call.idempotency_key},
        }
        try:
            with httpx.Client(
                base_url=self.base_url, transport=self.transport, timeout=call.timeout
            ) as client:
                response = client.post("/email", json=payload, headers=headers)
        except httpx.ConnectError as error:
            # No connection, so nothing was sent: safe to try again.
            raise DriverError(
                f"mail API unreachable: {error}", retryable=True, maybe_applied=False
            ) from error
        body: dict[str, Any] = response.json() if response.content else {}
        if response.status_code >= 400 or body.get("ErrorCode", 0) != 0:
            raise DriverError(
                body.get("Message") or f"mail API answered {response.status_code}",
                retryable=response.status_code == 429 or response.status_code >= 500,
                status=response.status_code,
                vendor_code=str(body.get("ErrorCode")) if "ErrorCode" in body else None,
            )
        return Sent(message_id=body["MessageID"], to=body["To"])


class FakeMail(Fake):
    """An outbox in memory: `outbox` holds every message sent."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outbox: list[Message] = []

    def state(self) -> dict[str, Any]:
        """Every message sent, in order."""
        with self._lock:
            return {"sent": [message.model_dump(mode="json") for message in self.outbox]}

    @implements(send_message)
    def send(self, input: Message, call: CallContext) -> Sent:
        with self._lock:
            self.outbox.append(input)
            return Sent(message_id=f"msg_{len(self.outbox):04d}", to=input.to)


mail_steps = steps("mail")


def _sent_to(fake: FakeMail, email: str) -> list[Message]:
    return [message for message in fake.outbox if message.to == email]


@mail_steps.then("{email} got {n:d} emails")
def got_emails(fake: FakeMail, email: str, n: int) -> None:
    found = len(_sent_to(fake, email))
    assert found == n, f"{email} got {found} emails, not {n}"


@mail_steps.then("{email} got 1 email")
def got_one_email(fake: FakeMail, email: str) -> None:
    got_emails(fake, email, 1)


@mail_steps.then('the last email to {email} says "{text}"')
def last_email_says(fake: FakeMail, email: str, text: str) -> None:
    sent = _sent_to(fake, email)
    assert sent, f"no email was sent to {email}"
    last = sent[-1]
    assert text in last.subject or text in last.body, (
        f'the last email to {email} does not say "{text}": its subject is '
        f"{last.subject!r} and its body {last.body!r}"
    )


mail = Connector(
    "mail",
    ops=[send_message],
    driver=MailDriver,
    fake=FakeMail,
    description="Transactional email.",
    steps=mail_steps,
)
