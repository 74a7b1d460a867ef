"""An app for the telemetry tests: an LLM-like connector whose output carries token counts, a
model and a cost, and a workflow that calls it, runs a step, may wait at a gate, and naps.

A prompt with `flaky` in it fails once, retryably, before it is answered.
"""

from __future__ import annotations

from pydantic import BaseModel

from remit import (
    App,
    ApprovalType,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    RetryPolicy,
    implements,
    op,
    workflow,
)


class Prompt(BaseModel):
    text: str
    model: str = "small-1"


class Reply(BaseModel):
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float


create_reply = op(
    "talk.replies.create",
    effect="read",
    input=Prompt,
    output=Reply,
    retry=RetryPolicy(max_tries=3, initial=0.01, factor=2.0, cap=0.05),
)


class TalkDriver(Driver):
    """Stands for a live model API, which tests never reach."""

    credentials = ("TALK_API_KEY",)

    @implements(create_reply)
    def create(self, input: Prompt, call: CallContext) -> Reply:
        raise DriverError("the live model is not reachable from tests", retryable=False)


class FakeTalk(Fake):
    """Answers by echoing the prompt; counts a token a word, at a cent per hundred tokens."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.failed: set[str] = set()

    @implements(create_reply)
    def create(self, input: Prompt, call: CallContext) -> Reply:
        if "flaky" in input.text and input.text not in self.failed:
            self.failed.add(input.text)
            raise DriverError("the model is overloaded", retryable=True, status=529)
        words = len(input.text.split())
        answer = f"you said: {input.text}"
        tokens = len(answer.split())
        return Reply(
            text=answer,
            model=f"{input.model}-2025",
            input_tokens=words,
            output_tokens=tokens,
            cost_usd=(words + tokens) / 10_000,
        )


talk = Connector("talk", ops=[create_reply], driver=TalkDriver, fake=FakeTalk)


class Question(BaseModel):
    text: str
    approve: bool = False


class AnswerDraft(BaseModel):
    text: str


@workflow(name="ask", input=Question, uses=[create_reply])
def ask(ctx: Context, input: Question) -> dict[str, object]:
    reply = ctx.call(create_reply, text=input.text)
    words = ctx.step("count-words", lambda: len(reply.text.split()), output=int)
    if input.approve:
        decision = ctx.approval(
            "send", type="answer", title="Send the answer", draft=AnswerDraft(text=reply.text)
        )
        if not decision.approved:
            return {"sent": False}
    ctx.sleep(0.01)
    return {"text": reply.text, "words": words, "sent": True}


ANSWER = ApprovalType("answer", draft=AnswerDraft)

app = App(name="telemetry-app", workflows=[ask], connectors=[talk], approvals=[ANSWER])
