"""A company-wide connector both apps use: it sends a note to a person."""

from __future__ import annotations

from pydantic import BaseModel

from remit import CallContext, Connector, Driver, DriverError, Fake, implements, op


class Note(BaseModel):
    to: str
    text: str


class Sent(BaseModel):
    message_id: str


send = op("notify.notes.send", effect="write", idempotent=True, input=Note, output=Sent)


class NotifyDriver(Driver):
    @implements(send)
    def send(self, input: Note, call: CallContext) -> Sent:
        raise DriverError("the notify service is not reachable from tests", retryable=False)


class NotifyFake(Fake):
    @implements(send)
    def send(self, input: Note, call: CallContext) -> Sent:
        return Sent(message_id=f"msg_{len(self.effects) + 1}")


notify = Connector("notify", ops=[send], driver=NotifyDriver, fake=NotifyFake)
