"""`Chats(client)`: a person's chats with the operator agent, and what they do with its drafts.

A person sees their own chats. Reading another's is the policy action `read_chats` on the app
(with the chat's owner in its context), and each such read is written to the audit trail. Only
a chat's owner speaks in it, confirms, discards or tries its draft.

Each message starts a turn: a run of the built-in workflow `chat`, started as the person (so
`Action::"start"` on `Workflow::"chat"` says who may use the agent). A chat has one turn going
at a time.

Confirming a draft runs its act through the client as the person, under the policies, with a
key derived from the draft (a confirm sent twice acts once), and writes an audit row with `via`
`chat/<id>`. A refusal is written to the chat with the policy's reason and raised; the draft
stays, to be discarded or asked about. A confirmation names the draft the person saw (its id),
and claims it before acting: a draft is acted on once, and never after it was settled.
"""

from __future__ import annotations

import builtins
import hashlib
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remit.agent.models import Chat, ChatMessage, ChatView, Draft
from remit.agent.store import STALE_CLAIM, ChatStore
from remit.core import limits
from remit.core.audit import audit_row
from remit.core.errors import (
    ChatBusy,
    ChatNotFound,
    DecisionRefused,
    NoDraft,
    RemitError,
    TaskRefused,
)
from remit.core.schema import audit, chats
from remit.ops.runs import keyed_run_id
from remit.policy.cedar import CHAT, PolicyDenied, denied

if TYPE_CHECKING:
    from remit.agent.sandbox import SandboxResult
    from remit.client import Client

# The longest question a person may ask, in characters.
MOST_TEXT = 8000
# How long a chat's title may be.
MOST_TITLE = 200
# A reader's reads of another's chat are recorded once in this many seconds (a page that polls
# would record a row at each look).
AUDIT_EVERY = 600.0
# The most sandboxes one process runs at once: each is a process of its own, for up to minutes.
MOST_SANDBOXES = 2
_SANDBOXES = threading.BoundedSemaphore(MOST_SANDBOXES)
# Seconds after which a question whose turn's run was never started is given up for dead (the
# process that asked died between the two).
ABANDONED = 60.0


class Chats:
    """The chats of `client`'s app (see the module)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def store(self) -> ChatStore:
        self._agent()
        return ChatStore(self._client.db, self._client.app.name, clock=self._client.clock)

    def open(self, *, title: str = "", by: str | None = None) -> Chat:
        """Open a chat as `by`, for whoever may start `chat`."""
        who = self._client.person(by)
        limits.check_text(title, what="a chat's title", target="chats.open", limit=MOST_TITLE)
        agent = self._agent()
        self._client.services.guard.require(
            who, "start", CHAT, {"input": {"chat_id": "", "seq": 1}}
        )
        return self.store.create(who, agent.model, title.strip() or "New chat")

    def list(
        self, *, owner: str | None = None, limit: int = 50, by: str | None = None
    ) -> builtins.list[Chat]:
        """`owner`'s chats (default: `by`'s own), newest first."""
        who = self._client.person(by)
        whose = owner or who
        if whose != who:
            self._may_read_others(who, whose, target=f"chats/{whose}")
        return [self._settled(chat) for chat in self.store.list(whose, limit=limit)]

    def get(self, chat_id: str, *, by: str | None = None, audited: bool = True) -> ChatView:
        """The chat with its messages. Another's is read with `read_chats` and written to the
        audit trail, at most once in `AUDIT_EVERY` seconds a reader and chat (unless `audited`
        is False: what polls a chat already read)."""
        chat = self._readable(chat_id, by, audited=audited)
        return ChatView(chat=chat, messages=self.store.messages(chat.id))

    def chat(self, chat_id: str, *, by: str | None = None, audited: bool = True) -> Chat:
        """The chat without its messages (its status and draft), read as `get` reads it."""
        return self._readable(chat_id, by, audited=audited)

    def messages(
        self, chat_id: str, *, after: int = 0, by: str | None = None, audited: bool = True
    ) -> builtins.list[ChatMessage]:
        """The chat's messages after `after` (its `seq`), oldest first, read as `get` reads."""
        chat = self._readable(chat_id, by, audited=audited)
        return self.store.messages(chat.id, after=after)

    def say(self, chat_id: str, text: str, *, by: str | None = None) -> str:
        """Ask the agent `text` in the chat, and return the run id of the turn that answers.
        A draft not yet confirmed is discarded first (the person asked something else)."""
        chat = self._own(chat_id, by)
        text = text.strip()
        limits.check_text(text, what="a message to the agent", target="chats.say", limit=MOST_TEXT)
        if not text:
            raise RemitError("a message to the agent needs some text: what to ask or tell it")
        if chat.status == "thinking":
            raise _busy(chat)
        if self._held(chat):
            raise ChatBusy(
                f"chat {chat.id}'s draft {chat.acting} is being confirmed: ask once it is",
                run_id=chat.turn or "",
            )
        guard = self._client.services.guard
        guard.require(chat.owner, "start", CHAT, {"input": {"chat_id": chat.id, "seq": 1}})
        if chat.draft is not None:
            self._settle_draft(chat, chat.draft, "discarded", "you asked something else first")
        # The turn's run id is known before its run is started (a start under a key), so the
        # chat names it in the same write that asks: a process that dies between the two
        # leaves a chat `_settled` can tell is not answering.
        seq = self.store.next_seq(chat.id)
        key = f"{chat.id}.{seq}"
        turn = keyed_run_id(self._client.app.name, chat.owner, key)
        asked = self.store.add(
            chat.id,
            "user",
            text,
            by=chat.owner,
            key=f"ask:{uuid.uuid4().hex}",
            chat={"status": "thinking", "asked": seq, "turn": turn},
            when=(chats.c.status == "idle") & self._unclaimed(),
            seq=seq,
        )
        if asked is None or asked.seq != seq or asked.role != "user":
            raise _busy(self.store.get(chat.id))
        try:
            self._client.runs.start(CHAT, {"chat_id": chat.id, "seq": seq}, by=chat.owner, key=key)
        except BaseException as error:
            if self._client.services.runs.find(turn) is None:
                self.store.add(
                    chat.id,
                    "note",
                    f"The question was not taken up: {error}",
                    by="agent",
                    key=f"{turn}:unasked",
                    chat={"status": "idle"},
                    when=chats.c.asked == seq,
                )
            raise
        return turn

    def wait(self, chat_id: str, *, timeout: float = 120.0, by: str | None = None) -> ChatView:
        """The chat once its turn has ended (at most `timeout` seconds; then as it is)."""
        until = time.monotonic() + timeout
        self._readable(chat_id, by)
        while True:
            chat = self._readable(chat_id, by, audited=False)
            if chat.status == "idle" or time.monotonic() >= until:
                return ChatView(chat=chat, messages=self.store.messages(chat.id))
            time.sleep(0.2)

    def confirm(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage:
        """Run the chat's draft (the one `draft_id` names, if given: the draft the person saw) as
        its owner, under the policies, and return the `act` message saying what became of it.
        A refusal (the policies', `PolicyDenied`; or a decision's, `DecisionRefused`, with every
        reason) is written and raised, and the draft stays, to discard or ask about. One
        confirmation of a draft acts at a time (`ChatBusy` for another meanwhile)."""
        chat = self._own(chat_id, by)
        draft = _draft_of(chat, draft_id)
        if not self.store.claim(chat.id, draft.id):
            raise ChatBusy(
                f"chat {chat.id}'s draft {draft.id} is being confirmed, or was just settled: "
                "look at the chat again",
                run_id=chat.turn or "",
            )
        try:
            outcome = self._act(chat, draft)
        except (PolicyDenied, DecisionRefused, TaskRefused) as refusal:
            self.store.add(
                chat.id,
                "act",
                f"Refused: {refusal}",
                by=chat.owner,
                key=f"refused:{uuid.uuid4().hex}",
                data={
                    "act": draft.act,
                    "args": draft.args,
                    "outcome": "refused",
                    "reason": str(refusal),
                    "draft_id": draft.id,
                },
                chat={"acting": None, "acting_since": None},
                when=chats.c.acting == draft.id,
            )
            raise
        except RemitError as error:
            return self._settle_draft(chat, draft, "failed", str(error))
        except BaseException:
            self.store.update(
                chat.id, acting=None, acting_since=None, when=chats.c.acting == draft.id
            )
            raise
        return self._settle_draft(chat, draft, "done", outcome.pop("said"), outcome)

    def discard(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage:
        """Drop the chat's draft; the agent is told it was not done."""
        chat = self._own(chat_id, by)
        draft = _draft_of(chat, draft_id)
        if self._held(chat):
            raise ChatBusy(
                f"chat {chat.id}'s draft {draft.id} is being confirmed: it cannot be discarded",
                run_id=chat.turn or "",
            )
        return self._settle_draft(chat, draft, "discarded", "the person discarded it")

    def sandbox(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage:
        """Try the chat's drafted start on fresh fakes, in a throwaway database of its own (the
        live ledger, budgets and fakes never see it), and return the `sandbox` message with
        what the run did. The draft stays, to be confirmed or not."""
        from remit.agent.sandbox import try_workflow

        chat = self._own(chat_id, by)
        draft = _draft_of(chat, draft_id)
        if draft.act != "start":
            raise NoDraft(
                f"chat {chat.id}'s draft is to {draft.act}, not to start a run: only a start "
                "can be tried in a sandbox"
            )
        folder = self._client.app.folder
        if folder is None:
            raise RemitError("a sandbox runs the app from its folder: load it with `remit --app`")
        workflow = str(draft.args.get("workflow") or "")
        given = draft.args.get("input")
        if not _SANDBOXES.acquire(blocking=False):
            raise ChatBusy(
                f"{MOST_SANDBOXES} sandboxes are running in this process already: try again in "
                "a minute",
                run_id=chat.turn or "",
            )
        try:
            result = try_workflow(
                folder, workflow, given if isinstance(given, dict) else {}, by=chat.owner
            )
        finally:
            _SANDBOXES.release()
        return self._added(
            chat,
            "sandbox",
            _sandbox_text(result),
            key=f"sandbox:{uuid.uuid4().hex}",
            data={**result.model_dump(mode="json"), "draft_id": draft.id},
        )

    # What the room checks.

    def _held(self, chat: Chat) -> bool:
        """Whether a confirmation holds the chat's draft (one that held it `STALE_CLAIM`
        seconds is taken for dead: its process died mid-act)."""
        if chat.acting is None or chat.acting_since is None:
            return False
        return (self._client.clock.now() - chat.acting_since).total_seconds() < STALE_CLAIM

    def _unclaimed(self) -> sa.ColumnElement[bool]:
        """`_held`, negated, as a condition on the chat's row."""
        stale = self._client.clock.now() - timedelta(seconds=STALE_CLAIM)
        return chats.c.acting.is_(None) | (chats.c.acting_since < stale)

    def _agent(self) -> Any:
        agent = getattr(self._client.app, "agent", None)
        if agent is None:
            raise ChatNotFound(
                f"app `{self._client.app.name}` has no operator agent: declare one with "
                'App(agent=OperatorAgent(model=...)) (README, "Operator agent")'
            )
        return agent

    def _readable(self, chat_id: str, by: str | None, *, audited: bool = True) -> Chat:
        """The chat, if `by` owns it or may read others' (`read_chats`, written to the audit
        trail unless `audited` is False: a page that polls records its first read)."""
        who = self._client.person(by)
        chat = self.store.get(chat_id)
        if chat.owner != who:
            self._may_read_others(who, chat.owner, target=chat.id, audited=audited)
        return self._settled(chat)

    def _own(self, chat_id: str, by: str | None) -> Chat:
        who = self._client.person(by)
        chat = self.store.get(chat_id)
        if chat.owner != who:
            raise denied(
                who, "start", CHAT, f"chat {chat.id} is {chat.owner}'s: only they speak in it"
            )
        return self._settled(chat)

    def _may_read_others(self, who: str, owner: str, *, target: str, audited: bool = True) -> None:
        guard = self._client.services.guard
        guard.require(who, "read_chats", self._client.app.name, {"owner": owner})
        if not audited:
            return
        now = self._client.clock.now()
        since = now - timedelta(seconds=AUDIT_EVERY)
        with self._client.db.begin() as conn:
            recorded = conn.execute(
                sa.select(audit.c.id)
                .where(
                    audit.c.target == target,
                    audit.c.actor == who,
                    audit.c.action == "read_chats",
                    audit.c.at >= since,
                )
                .limit(1)
            ).first()
            if recorded is not None:
                return
            audit_row(
                conn,
                at=self._client.clock.now(),
                actor=who,
                action="read_chats",
                target=target,
                meta={"owner": owner},
            )

    def _settled(self, chat: Chat) -> Chat:
        """`chat`, idle if its turn will not answer: its run ended without ending the turn
        (cancelled, or failed before its last step), or never started (the process asking died
        first, `ABANDONED` seconds ago). A note says so."""
        if chat.status != "thinking" or chat.turn is None:
            return chat
        run = self._client.services.runs.find(chat.turn)
        if run is None:
            waited = (self._client.clock.now() - chat.updated_at).total_seconds()
            if waited < ABANDONED:
                return chat
            said = f"The question was not taken up: its run {chat.turn} was never started"
        elif run.finished:
            said = (
                f"The turn ended without an answer (its run {run.run_id} {run.status}: "
                f"{run.error or run.status})"
            )
        else:
            return chat
        self.store.add(
            chat.id,
            "note",
            said,
            by="agent",
            key=f"{chat.turn}:end",
            chat={"status": "idle"},
            when=chats.c.turn == chat.turn,
        )
        return self.store.get(chat.id)

    # Acting on a draft.

    def _act(self, chat: Chat, draft: Draft) -> dict[str, Any]:
        """Run `draft` through the client as the chat's owner; what it did."""
        client, who, args = self._client, chat.owner, draft.args
        key = "chat-" + hashlib.sha256(f"{chat.id}\n{draft.id}".encode()).hexdigest()[:24]
        if draft.act == "start":
            if args.get("workflow") == CHAT:
                raise RemitError(f"`{CHAT}` runs a chat's turns: a person asks in the chat instead")
            handle = client.runs.start(
                str(args.get("workflow")), _mapping(args.get("input")), by=who, key=key
            )
            return {"said": f"Started {handle.run_id}", "run_id": handle.run_id}
        if draft.act == "decide":
            approval = str(args.get("approval_id"))
            edit = args.get("edit")
            client.approvals.decide(
                approval,
                str(args.get("decision")),
                key=key,
                edits={approval: _mapping(edit)} if edit else None,
                reason=args.get("reason") or None,
                by=who,
                via=f"chat/{chat.id}",
            )
            found = client.approvals.get(approval)
            return {"said": f"{found.status.capitalize()} {approval}", "run_id": found.run_id}
        if draft.act == "resolve":
            client.tasks.resolve(
                str(args.get("task_id")), done=bool(args.get("done")), key=key, by=who
            )
            return {"said": f"Answered task {args.get('task_id')}"}
        if draft.act == "retry":
            retried = client.runs.retry(str(args.get("run_id")), key=key, by=who)
            return {
                "said": f"Retried {args.get('run_id')}",
                "run_id": getattr(retried, "run_id", None),
            }
        if draft.act == "cancel":
            run = client.runs.cancel(str(args.get("run_id")), by=who)
            return {"said": f"Cancelled {run.run_id}", "run_id": run.run_id}
        client.runs.send(
            str(args.get("run_id")), str(args.get("topic")), args.get("payload"), key=key, by=who
        )
        return {"said": f"Sent to {args.get('run_id')} on {args.get('topic')}"}

    def _settle_draft(
        self,
        chat: Chat,
        draft: Draft,
        outcome: str,
        said: str,
        extra: Mapping[str, Any] | None = None,
    ) -> ChatMessage:
        """Write what became of `draft` (its tool's answer for the model, an audit row) and
        clear it from the chat."""
        text = {
            "done": f"Done: {said}",
            "failed": f"Failed: {said}",
            "discarded": f"Discarded: {draft.summary}",
        }[outcome]
        answer = {
            "kind": "request",
            "parts": [
                {
                    "part_kind": "tool-return",
                    "tool_name": _tool_name(draft),
                    "tool_call_id": draft.tool_call_id,
                    "content": f"{outcome}: {said}",
                }
            ],
        }
        data = {
            "act": draft.act,
            "args": draft.args,
            "outcome": outcome,
            "summary": draft.summary,
            "via": f"chat/{chat.id}",
            **(extra or {}),
        }
        audit = None
        if outcome != "discarded":
            audit = {
                "actor": chat.owner,
                "action": f"chat.{draft.act}",
                "target": str(data.get("run_id") or draft.args.get("approval_id") or chat.id),
                "meta": {"via": f"chat/{chat.id}", "outcome": outcome, "args": draft.args},
            }
        # A discard waits for no confirmation going; a confirmation settles its own claim.
        when = self._unclaimed() if outcome == "discarded" else chats.c.acting == draft.id
        written = self.store.add(
            chat.id,
            "act",
            text,
            by=chat.owner,
            key=f"act:{draft.id}",
            data={**data, "draft_id": draft.id},
            history=[answer],
            chat={"draft": None, "acting": None, "acting_since": None},
            when=when,
            audit=audit,
        )
        if written is None:
            raise ChatBusy(
                f"chat {chat.id}'s draft {draft.id} is being confirmed: it cannot be discarded",
                run_id=chat.turn or "",
            )
        return written

    def _added(
        self, chat: Chat, role: Any, text: str, *, key: str, data: dict[str, Any]
    ) -> ChatMessage:
        written = self.store.add(chat.id, role, text, by=chat.owner, key=key, data=data)
        assert written is not None
        return written


def _draft_of(chat: Chat, draft_id: str | None = None) -> Draft:
    if chat.draft is None:
        raise NoDraft(f"chat {chat.id} has no draft: ask the agent to propose an act first")
    if draft_id is not None and chat.draft.id != draft_id:
        raise NoDraft(
            f"chat {chat.id}'s draft is now {chat.draft.id}, not {draft_id}: the draft you saw "
            "was settled or replaced, so look at the chat again"
        )
    return chat.draft


def _busy(chat: Chat) -> ChatBusy:
    return ChatBusy(
        f"chat {chat.id} is still answering (run {chat.turn}): wait for its answer, then ask",
        run_id=chat.turn or "",
    )


def _mapping(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RemitError(f"the draft's input is {type(value).__name__}, not a JSON object")
    return value


def _tool_name(draft: Draft) -> str:
    from remit.agent.tools import ACT_TOOLS

    return next(name for name, (act, _) in ACT_TOOLS.items() if act == draft.act)


def _sandbox_text(result: SandboxResult) -> str:
    calls = ", ".join(call.op for call in result.calls) or "no calls"
    return f"Tried {result.workflow} on fresh fakes: {result.status}; it made {calls}"
