"""`remit chat`, `remit chat ask`, `remit chat show` and `remit chats`: a person's chats with the
app's operator agent (`remit.agent`), which answers from the live instance and proposes acts
(a draft) that the person confirms, discards, or first tries on fresh fakes.

A message starts the agent's turn, a run of the built-in workflow `chat`, which a worker runs
(`remit worker`, or `remit serve --worker`): the command follows the turn, printing the reads
the agent makes and its answer as they come. On the database the chats are `remit.agent.Chats`
over the client; through `remit serve` (`REMIT_URL`) the API's, as the token's principal."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    HelpGroup,
    PlainTable,
    cli,
    client_of,
    command_group,
    moment,
    out,
    print_json,
    styled,
    whole_ids,
)
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.agent.models import Chat, ChatMessage, ChatView, Draft
    from remit.core.errors import RemitError
    from remit.surface import ChatsSurface

# What the interactive chat asks, and the answers it takes to a draft.
PROMPT = "you> "
CONFIRM = "Confirm? [y/N/t=try in sandbox] "
# How a message of each role is introduced where it is printed.
_LABELS = {
    "user": "you",
    "assistant": "agent",
    "tool": "  read",
    "act": "act",
    "sandbox": "sandbox",
    "note": "note",
}
_ROLE_COLOURS = {
    "assistant": "bold",
    "tool": "dim",
    "act": "green",
    "sandbox": "cyan",
    "note": "yellow",
}
_OUTCOME_COLOURS = {"done": "green", "refused": "red", "failed": "red", "discarded": "yellow"}
# How often a command following a turn asks what came (through `remit serve`, a request each).
_FOLLOW_POLL = 0.5
# How long a command waits for a turn by default.
TURN_SECONDS = 180.0


class _ChatGroup(HelpGroup):
    """`remit chat`: its commands, and with no command (or a chat's id) the interactive chat,
    as the hidden command `talk`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        first = args[0] if args else None
        if first is None or (first not in self.commands and first not in ("--help", "-h")):
            args = ["talk", *args]
        return super().parse_args(ctx, args)


chat_cli = command_group(
    "Chat with the app's operator agent: `remit chat [CHAT_ID] [--new] [--as WHO]` talks with "
    "it here, asking before it acts; `remit chat ask` sends one message and prints the answer, "
    "for scripts.",
    cls=_ChatGroup,
)
cli.add_typer(chat_cli, name="chat")

Timeout = Annotated[
    float,
    typer.Option("--timeout", min=1, help="How many seconds to wait for the agent's turn."),
]


@contextlib.contextmanager
def chats_of(app_dir: Path | None) -> Iterator["ChatsSurface"]:
    """The chats of the app: through `remit serve` as the token's principal when `--url`
    (`REMIT_URL`) is given, else `remit.agent.Chats` on a client of the app's database."""
    with client_of(app_dir) as remit:
        from remit.client import Client

        if isinstance(remit, Client):
            from remit.agent.room import Chats

            yield Chats(remit)
        else:
            from remit.remote import RemoteClient

            assert isinstance(remit, RemoteClient)
            yield remit.chats


@chat_cli.command("talk", hidden=True)
def talk(
    chat_id: Annotated[
        str | None,
        typer.Argument(help="The chat to go on with (default: a new one)."),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Open a new chat.")] = False,
    timeout: Timeout = TURN_SECONDS,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Talk with the operator agent: each line you type is a message; the agent's reads and
    answer are printed as they come, and an act it proposes is confirmed (y), discarded (N) or
    tried in the sandbox first (t). An empty line, `exit` or Ctrl-D ends it."""
    from remit.core.errors import RemitError

    if new and chat_id is not None:
        raise typer.BadParameter("give a chat's id or --new, not both")
    with chats_of(app_dir) as chats:
        if chat_id is None:
            chat, seen = chats.open(by=as_), 0
            out.print(Text(printable(f"chat {chat.id}: ask the agent; an empty line ends it")))
        else:
            view = chats.get(chat_id, by=as_)
            chat = view.chat
            out.print(Text(printable(f"chat {chat.id}: {chat.title or '(untitled)'}")))
            for message in view.messages:
                _print_message(message)
            seen = max((m.seq for m in view.messages), default=0)
        while True:
            if chat.status == "thinking":
                # A turn goes (one asked elsewhere, or one that outlasted --timeout): follow
                # it before asking for the next message, which it would refuse.
                out.print(Text("  the agent is thinking…"))
                view, seen = _follow(chats, chat.id, seen, as_, timeout)
                chat = view.chat
                if chat.status == "thinking":
                    out.print(
                        Text(
                            printable(
                                f"  still thinking after {timeout:g} s (is a worker running? "
                                f"`remit worker`): `remit chat {chat.id}` goes on later"
                            )
                        )
                    )
                    return
                continue
            if chat.draft is not None:
                chat, seen, ended = _ask_about(chats, chat, seen, as_)
                if ended:
                    return
                continue
            try:
                text = input(PROMPT).strip()
            except EOFError:
                out.print()
                return
            if text in ("", "exit", "quit"):
                return
            try:
                chats.say(chat.id, text, by=as_)
            except RemitError as refused:
                # A turn going (ChatBusy), a message too long...: said, and the chat goes on.
                out.print(styled(f"  {refused}", "yellow"), soft_wrap=True)
                chat = chats.get(chat.id, by=as_).chat
                continue
            view, seen = _follow(chats, chat.id, seen, as_, timeout)
            chat = view.chat


def _ask_about(
    chats: "ChatsSurface", chat: "Chat", seen: int, by: str | None
) -> tuple["Chat", int, bool]:
    """Show the chat's draft and do what the person answers: confirm it (y), try it in the
    sandbox first (t), else discard it; at the end of the input (Ctrl-D), nothing: the draft
    stays, and the chat ends (the last of the three: True). A refusal is printed with its
    reason; the draft stays, and the chat goes on."""
    from remit.core.errors import ChatBusy, DecisionRefused, NoDraft, TaskRefused
    from remit.policy.cedar import PolicyDenied

    assert chat.draft is not None
    _print_draft(chat.draft)
    try:
        answer = input(CONFIRM).strip().lower()
    except EOFError:
        out.print()
        out.print(
            Text(printable(f"  the draft stays: {_confirm_hint(chat.id, chat.draft).strip()}")),
            soft_wrap=True,
        )
        return chat, seen, True
    shown = chat.draft.id  # what is acted on is the draft shown, not one made since
    try:
        if answer in ("y", "yes"):
            chats.confirm(chat.id, draft_id=shown, by=by)
        elif answer in ("t", "try"):
            chats.sandbox(chat.id, draft_id=shown, by=by)
        else:
            chats.discard(chat.id, draft_id=shown, by=by)
    except (PolicyDenied, DecisionRefused, TaskRefused) as refused:
        # The room recorded most refusals as an `act` message, printed below; not one the
        # policies made before it acted (not the chat's owner, say): the reason, here.
        out.print(styled(f"  refused: {refused}", "red"), soft_wrap=True)
    except (NoDraft, ChatBusy) as stale:
        # Settled or replaced elsewhere meanwhile (or being confirmed there): nothing done
        # here; the chat as it is now is shown, a new draft asked about afresh.
        out.print(styled(f"  {stale}", "yellow"), soft_wrap=True)
    seen = _print_after(chats, chat.id, seen, by)
    chat = chats.get(chat.id, by=by).chat
    if chat.draft is not None and chat.draft.id == shown and answer not in ("t", "try"):
        # Refused (or not settled): the draft stays for the next turn to change; not asked
        # about again.
        out.print(Text("  the draft stays: say what to change, or an empty line to end"))
        return chat.model_copy(update={"draft": None}), seen, False
    return chat, seen, False


@chat_cli.command("ask")
def ask(
    chat_or_text: Annotated[
        str | None,
        typer.Argument(
            help="The chat to send it to (default: your latest chat, or a new one). A chat's id "
            "alone, with --yes, --no or --try, acts on its draft and sends nothing.",
            show_default=False,
        ),
    ] = None,
    text: Annotated[
        str | None,
        typer.Argument(
            help="The message: what to ask or tell the agent.",
            show_default=False,
        ),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Send it to a new chat.")] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Confirm the draft you have read, named with --draft (exit 1 if it is refused "
            "or fails): with no message only, never in the command that asks.",
        ),
    ] = False,
    no: Annotated[
        bool,
        typer.Option("--no", help="Discard the chat's draft: with no message only, as --yes."),
    ] = False,
    try_: Annotated[
        bool,
        typer.Option(
            "--try",
            help="Try a proposed start on fresh fakes first, and print what it did there.",
        ),
    ] = False,
    draft_id: Annotated[
        str | None,
        typer.Option(
            "--draft",
            help="The draft to act on: its id (drf_…) as you saw it (on the `draft:` line, in "
            "the hint under it, `chat.draft.id` in --json, or --quiet's output). Required with "
            "--yes. Another draft, or one settled since, is refused (exit 1).",
            show_default=False,
        ),
    ] = None,
    timeout: Timeout = TURN_SECONDS,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: the chat and the messages this command added.",
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only the id of the chat's draft at the end (nothing when it has none), "
            'for a script: draft=$(remit chat ask "…" --quiet), then, once read, '
            "remit chat ask --yes --draft $draft.",
        ),
    ] = False,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Send the operator agent one message and print its answer: the reads it made, what it
    said, and the act it proposes (its draft), if any, with the command that confirms it. Then,
    once you have read the draft, `remit chat ask [CHAT_ID] --yes --draft DRAFT_ID` confirms
    it, under the policies (exit 1, with the reason, when it is refused or fails), and --no
    discards it: with no message, for a draft is confirmed only once seen. --try tries a
    proposed start on fresh fakes (with a message too: it changes nothing live). A worker must
    run the agent's turn."""
    from remit.core.errors import DecisionRefused, RemitError, TaskRefused
    from remit.policy.cedar import PolicyDenied

    if yes and no:
        raise typer.BadParameter("give --yes (confirm the draft) or --no (discard it), not both")
    if as_json and quiet:
        raise typer.BadParameter("give --json (the chat and its messages) or --quiet, not both")
    given = [each for each in (chat_or_text, text) if each is not None]
    acts = yes or no or try_
    if draft_id is not None and not acts:
        raise typer.BadParameter("--draft names the draft that --yes, --no or --try acts on")
    chat_id, said = _chat_and_text(given, new=new, acts=acts)
    if said is not None:
        _no_blind_act(said, yes=yes, no=no, draft_id=draft_id)
    if yes and draft_id is None:
        raise RemitError(
            "--yes confirms the draft you read, so name it: --draft DRAFT_ID (copy the hint "
            "line printed under the draft, `remit chat ask CHAT_ID --yes --draft drf_…`, which "
            "is the whole command); nothing was done"
        )
    with chats_of(app_dir) as chats:
        if chat_id is None and not new:
            latest = chats.list(limit=1, by=as_)
            chat_id = latest[0].id if latest else None
        if chat_id is None:
            if said is None:
                raise RemitError(
                    "you have no chat, so no draft to act on: ask first (`remit chat ask "
                    '"…"`), read the draft, then `remit chat ask --yes --draft DRAFT_ID` '
                    "confirms it"
                )
            chat_id = chats.open(by=as_).id
        seen = max((m.seq for m in chats.messages(chat_id, by=as_)), default=0)
        first = seen
        printing = not (as_json or quiet)
        if printing:
            out.print(Text(printable(f"chat {chat_id}")))
        run_id: str | None = None
        if said is not None:
            run_id = chats.say(chat_id, said, by=as_)
            view, seen = _follow(chats, chat_id, seen, as_, timeout, printing=printing)
        else:
            view = chats.get(chat_id, by=as_)
        draft = view.chat.draft
        # The draft acted on: the one named, else (--no, --try) the one just read and printed,
        # so that a draft replaced meanwhile is refused, not acted on unseen.
        acting_on = draft_id or (draft.id if draft is not None else None)
        failed: RemitError | None = None
        if draft is not None or draft_id is not None:
            if printing and draft is not None:
                _print_draft(draft)
            if try_ and (draft is None or draft.sandbox_ok):
                chats.sandbox(chat_id, draft_id=acting_on, by=as_)
                seen = _print_after(chats, chat_id, seen, as_, printing=printing)
            elif try_ and printing and draft is not None:
                out.print(Text(f"  --try: a {draft.act} is not tried in the sandbox, only a start"))
            try:
                if yes:
                    acted = chats.confirm(chat_id, draft_id=acting_on, by=as_)
                    failed = _not_done(acted)
                elif no:
                    chats.discard(chat_id, draft_id=acting_on, by=as_)
            except (PolicyDenied, DecisionRefused, TaskRefused) as error:
                failed = error  # recorded in the chat as an `act` message, printed below
            seen = _print_after(chats, chat_id, seen, as_, printing=printing)
            if printing and draft is not None and not (yes or no):
                out.print(Text(printable(_confirm_hint(chat_id, draft))))
        elif acts and printing:
            out.print(Text("no draft: the agent proposes nothing to confirm"))
        if as_json or quiet:
            view = chats.get(chat_id, by=as_)
        if as_json:
            print_json(
                {
                    "run_id": run_id,
                    "chat": view.chat,
                    "messages": [m for m in view.messages if m.seq > first],
                }
            )
        elif quiet and view.chat.draft is not None:
            out.print(view.chat.draft.id, soft_wrap=True)
    if failed is not None:
        raise failed  # its reason, printed as every error is, and exit 1
    if view.chat.status != "idle":
        raise RemitError(
            f"the agent is still thinking after {timeout:g} s: `remit chat show {chat_id}` "
            "shows its answer once it comes (is a worker running? `remit worker`)"
        )


def _not_done(acted: "ChatMessage") -> "RemitError | None":
    """The error to exit 1 with when the confirmed act was not done (its `act` message,
    printed, says why); None when it was."""
    from remit.core.errors import RemitError

    outcome = str(acted.data.get("outcome") or "")
    if outcome == "done":
        return None
    why = acted.data.get("reason") or acted.text
    return RemitError(f"the act was not done ({outcome or 'no outcome'}): {why}")


def _no_blind_act(said: str, *, yes: bool, no: bool, draft_id: str | None) -> None:
    """Refuse, before anything is sent, to confirm or discard a draft in the command that asks
    for it: the person has not read it. (--try may go with a message: a sandbox changes nothing
    live.)"""
    from remit.core.errors import RemitError

    flag = "--yes" if yes else "--no" if no else None
    quoted = json.dumps(said if len(said) <= 40 else said[:39] + "…", ensure_ascii=False)
    if flag is not None:
        verb = "confirms" if yes else "discards"
        raise RemitError(
            f"{flag} {verb} a draft you have read: ask first (`remit chat ask {quoted}`), read "
            f"the draft, then `remit chat ask {flag} --draft DRAFT_ID` (the line printed under "
            f"the draft) {verb} it; nothing was sent"
        )
    if draft_id is not None:
        raise RemitError(
            "--draft names a draft you saw, and a message replaces it: give --draft without a "
            "message; nothing was sent"
        )


def _confirm_hint(chat_id: str, draft: "Draft") -> str:
    return f"  `remit chat ask {chat_id} --yes --draft {draft.id}` confirms it, --no discards it"


def _chat_and_text(given: list[str], *, new: bool, acts: bool) -> tuple[str | None, str | None]:
    """The chat named and the text to send, from `[CHAT_ID] [TEXT]`: a chat's id alone, or
    nothing (the latest chat), with --yes, --no or --try, sends nothing."""
    if len(given) == 2:
        if new:
            raise typer.BadParameter("give a chat's id or --new, not both")
        return given[0], given[1]
    if not given:
        if not acts:
            raise typer.BadParameter(
                "say what to ask the agent, or give --yes, --no or --try to act on its draft"
            )
        if new:
            raise typer.BadParameter("a new chat has no draft to act on: say what to ask it")
        return None, None
    [one] = given
    if acts and not new and one.startswith("chat_") and one.split() == [one]:
        return one, None
    if not one.strip():
        raise typer.BadParameter("the message is empty: say what to ask the agent")
    return None, one


@chat_cli.command("show")
def show(
    chat_id: Annotated[str, typer.Argument(help="The chat's id: chat_….")],
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print it as one JSON object, as GET /chats/{id} answers."),
    ] = False,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Show a chat: its messages, oldest first, and the act the agent proposes, if any."""
    with chats_of(app_dir) as chats:
        view = chats.get(chat_id, by=as_)
    if as_json:
        print_json(view)
        return
    _print_chat(view)


@cli.command("chats")
def list_chats(
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            help="Whose chats (default: your own); another's as the policies allow (read_chats).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 50,
    as_json: AsJson = False,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """List your chats with the operator agent, newest first."""
    with chats_of(app_dir) as chats:
        found = chats.list(owner=owner, limit=limit, by=as_)
    if as_json:
        print_json(found)
        return
    if not found:
        out.print("no chats" if owner is None else f"no chats of {printable(owner)}")
        return
    table = PlainTable("chat", "status", "title", "draft", "owner", "updated", box=None)
    for each in found:
        table.add_row(
            each.id,
            each.status,
            each.title or "-",
            "-" if each.draft is None else each.draft.summary,
            each.owner,
            moment(each.updated_at),
        )
    out.print(whole_ids(table, 0))


def _follow(
    chats: "ChatsSurface",
    chat_id: str,
    seen: int,
    by: str | None,
    timeout: float,
    *,
    printing: bool = True,
) -> tuple["ChatView", int]:
    """Follow the chat's turn until it is idle (or `timeout` seconds): each message after
    `seen` printed as it comes. One read a poll: the chat with its messages, the chat read
    before them, so that once it reads idle every message of the turn is among them."""
    deadline = time.monotonic() + timeout
    while True:
        view = chats.get(chat_id, by=by)
        for message in view.messages:
            if message.seq <= seen:
                continue
            if printing and message.role != "user":
                _print_message(message)
            seen = message.seq
        if view.chat.status == "idle" or time.monotonic() >= deadline:
            return view, seen
        time.sleep(_FOLLOW_POLL)


def _print_after(
    chats: "ChatsSurface", chat_id: str, seen: int, by: str | None, *, printing: bool = True
) -> int:
    """Print the chat's messages after `seen`; the last one's number."""
    for message in chats.messages(chat_id, after=seen, by=by):
        if printing and message.role != "user":
            _print_message(message)
        seen = max(seen, message.seq)
    return seen


def _print_chat(view: "ChatView") -> None:
    chat = view.chat
    out.print(
        Text.assemble(
            printable(f"chat {chat.id}  {chat.title or '(untitled)'}  "),
            styled(chat.status, "cyan" if chat.status == "thinking" else None),
        ),
        soft_wrap=True,
    )
    for name, value in (
        ("owner", chat.owner),
        ("engine", chat.engine),
        ("turn", chat.turn or "-"),
        ("opened", moment(chat.created_at)),
        ("updated", moment(chat.updated_at)),
    ):
        out.print(Text(printable(f"  {name:<7} {value}")))
    for message in view.messages:
        _print_message(message)
    if chat.draft is not None:
        _print_draft(chat.draft)


def _print_message(message: "ChatMessage") -> None:
    """One message: its role, then its text, each line of it printed as typed (escaped)."""
    label = _LABELS[message.role]
    colour = _ROLE_COLOURS.get(message.role)
    if message.role == "act":
        colour = _OUTCOME_COLOURS.get(str(message.data.get("outcome")), colour)
    lines = message.text.splitlines() or [""]
    out.print(styled(f"{label}: {lines[0]}", colour), soft_wrap=True)
    indent = " " * (len(label) + 2)
    for line in lines[1:]:
        out.print(styled(f"{indent}{line}", colour), soft_wrap=True)


def _print_draft(draft: "Draft") -> None:
    out.print(styled(f"draft: {draft.id} {draft.summary}", "magenta"), soft_wrap=True)
    args = json.dumps(draft.args, sort_keys=True, ensure_ascii=True)
    out.print(Text(printable(f"  {draft.act} {args}")), soft_wrap=True)
