"""An app for the limits tests: an echo op whose fake answers what a test scripts, a write
that can be lost, workflows that make big steps, outputs and calls, a gate and a collection;
and `counts`, the rows every act could write."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from remit import (
    App,
    ApprovalType,
    CallContext,
    Connector,
    Context,
    DriverError,
    Fake,
    InputInvalid,
    TooLarge,
    collection,
    implements,
    op,
    workflow,
)
from remit.core.schema import approvals, data, ledger, runs
from remit.testing import Harness
from tests.support import FAST

MiB = 1024 * 1024
OVER_2_MIB = "x" * (2 * MiB + 10)


class Text(BaseModel):
    text: str


class Mail(BaseModel):
    to: str


class MailId(BaseModel):
    message_id: str
    cost: float | None = None


echo = op("box.echo.say", effect="read", input=Text, output=Text, retry=FAST)
mail = op("box.mail.send", effect="write", input=Mail, output=MailId, retry=FAST)


class FakeBox(Fake):
    """Echoes its input, or answers what the test scripted in `answers`; a mail sent while
    `lost` is set times out after the vendor may have sent it; `cost` is what a mail's answer
    says it cost (NaN, for one)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answers: list[str] = []
        self.lost = False
        self.cost: float | None = None
        self.sent = 0

    @implements(echo)
    def say(self, input: Text, call: CallContext) -> Text:
        return Text(text=self.answers.pop(0) if self.answers else input.text)

    @implements(mail)
    def send(self, input: Mail, call: CallContext) -> MailId:
        if self.lost:
            raise DriverError("the mail service did not answer in time", retryable=True, status=504)
        self.sent += 1
        return MailId(message_id="msg_1", cost=self.cost)


box = Connector("box", ops=[echo, mail], driver=FakeBox, fake=FakeBox)


class Person(BaseModel):
    id: str
    email: str


people = collection("people", model=Person)


class Say(BaseModel):
    text: str = "hi"


class Size(BaseModel):
    size: int = 0


class Allowing(BaseModel):
    model_config = ConfigDict(extra="allow")
    text: str = ""


class Ignoring(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str = ""


class NoteDraft(BaseModel):
    note: str = ""
    amount: int = 1


@workflow(name="say", input=Say, uses=[echo])
def say(ctx: Context, input: Say) -> str:
    return ctx.call(echo, text=input.text).text


@workflow(name="big-step", input=Size)
def big_step(ctx: Context, input: Size) -> int:
    blob = ctx.step("blob", lambda: "x" * input.size)
    return len(blob)


@workflow(name="big-output", input=Size)
def big_output(ctx: Context, input: Size) -> str:
    return "x" * input.size


@workflow(name="big-call", input=Size, uses=[echo])
def big_call(ctx: Context, input: Size) -> str:
    try:
        return ctx.call(echo, text="x" * input.size).text
    except (TooLarge, InputInvalid) as refused:
        return f"refused: {refused}"


@workflow(name="nul-call", input=Say, uses=[echo])
def nul_call(ctx: Context, input: Say) -> str:
    try:
        return ctx.call(echo, text="a\x00b").text
    except InputInvalid as refused:
        return f"refused: {refused}"


@workflow(name="nul-step", input=Say)
def nul_step(ctx: Context, input: Say) -> str:
    return str(ctx.step("nul", lambda: {"name": "a\x00b"}))


@workflow(name="allowing", input=Allowing)
def allowing(ctx: Context, input: Allowing) -> dict[str, Any]:
    return input.model_dump()


@workflow(name="ignoring", input=Ignoring)
def ignoring(ctx: Context, input: Ignoring) -> dict[str, Any]:
    return input.model_dump()


@workflow(name="gate", input=Say)
def gate(ctx: Context, input: Say) -> str:
    return ctx.approval("ok", type="note", title="a note", draft=NoteDraft(note=input.text)).status


@workflow(name="mail-out", input=Say, uses=[mail])
def mail_out(ctx: Context, input: Say) -> str:
    return ctx.call(mail, to="ann@example.com").message_id


def make_app() -> App:
    return App(
        name="limits",
        workflows=[
            say,
            big_step,
            big_output,
            big_call,
            nul_call,
            nul_step,
            allowing,
            ignoring,
            gate,
            mail_out,
        ],
        connectors=[box],
        collections=[people],
        approvals=[ApprovalType("note", draft=NoteDraft)],
    )


def fake(harness: Harness) -> FakeBox:
    return harness.fake("box", FakeBox)


def counts(harness: Harness) -> dict[str, int]:
    """How many rows each table that an act writes holds: remit's runs, ledger, approvals and
    collection records, and DBOS's workflows."""
    db = harness.client.db
    schema = "" if db.is_sqlite else "dbos."
    with db.engine.connect() as conn:
        found = {
            table.name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for table in (runs, ledger, approvals, data)
        }
        found["workflow_status"] = conn.execute(
            sa.text(f"SELECT count(*) FROM {schema}workflow_status")
        ).scalar_one()
    return found
