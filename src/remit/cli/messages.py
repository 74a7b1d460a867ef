"""`remit send` and `remit state`: a message to a run, and what a run published; and what
`remit show` prints of a run's parent, waits, published state, messages and children."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
import re
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from remit.cli.base import (
    ActAs,
    AppDir,
    PlainTable,
    cli,
    client_of,
    json_input,
    moment,
    out,
    print_json,
    run_id_of,
    shortened,
    status_text,
    whole_ids,
)
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.ops.messages import Child, Message, Sent, Waiting
    from remit.surface import Surface

# A run's whole id, as remit makes them (`run_` and 16 hex digits): used without a lookup.
WHOLE_RUN_ID = re.compile(r"run_[0-9a-f]{16}")


@cli.command()
def send(
    run_id: Annotated[str, typer.Argument(help="The run's id (or a prefix only it begins with).")],
    topic: Annotated[str, typer.Argument(help="The topic it waits on, or will: `paid`.")],
    input: Annotated[
        str,
        typer.Option(
            "--input",
            help="The message as JSON (@FILE reads a file, - stdin): a wait with a model "
            "parses it.",
        ),
    ],
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="Makes it idempotent: the same message again under the key sends nothing and "
            "prints the first one's number.",
        ),
    ] = None,
    as_: ActAs = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print what the send did as one JSON object, as the HTTP API answers."
        ),
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Send a run a message on a topic: a run waiting on it carries on with it, a run not
    waiting on it yet keeps it until a wait takes it. A finished run takes no message."""
    payload = json_input(input, "--input", app_dir, cap="input_bytes")
    with client_of(app_dir) as remit:
        # A whole id is sent as it is: a sender (a feed) may send without reading the run.
        if not WHOLE_RUN_ID.fullmatch(run_id):
            run_id = run_id_of(remit, run_id)
        sent = remit.runs.send(run_id, topic, payload, key=key, by=as_)
    if as_json:
        from remit.serve.message_routes import SentView

        print_json(SentView.model_validate(sent.as_json()))
        return
    for line in _sent_lines(sent):
        out.print(Text(printable(line)), soft_wrap=True)


def _sent_lines(sent: "Sent") -> list[str]:
    if sent.replayed:
        return [
            f"message {sent.seq} on {sent.topic} to {sent.run_id} (replayed: this key had "
            "already sent it; nothing was sent again)"
        ]
    said = f"message {sent.seq} on {sent.topic} sent to {sent.run_id}"
    if sent.resumed_workflow_id is not None:
        return [
            said,
            f"  the run was waiting on {sent.topic}: it resumes on attempt "
            f"{sent.resumed_workflow_id}",
        ]
    return [
        said,
        f"  the run is not waiting on {sent.topic}: it keeps the message until a wait for "
        f"{sent.topic} takes it",
    ]


@cli.command()
def state(
    run_id: Annotated[str, typer.Argument(help="The run's id (or a prefix only it begins with).")],
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print it as one JSON object, key by key, as the API does."),
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Show what a run published (`ctx.publish`): the latest value of each key."""
    with client_of(app_dir) as remit:
        run_id = run_id_of(remit, run_id)
        published = remit.runs.state(run_id)
    if as_json:
        print_json(published)
        return
    if not published:
        out.print(Text(f"{run_id} has published nothing"))
    for line in _state_lines(published, full=True):
        out.print(Text(line), soft_wrap=True)


def _state_lines(published: dict[str, Any], *, full: bool) -> list[str]:
    return [f"{printable(k)} = {shortened(json.dumps(v), full=full)}" for k, v in published.items()]


class Around:
    """What `remit show` prints of a run beyond its steps and ledger: the run that started it,
    what it waits for, what it published, its messages and its children."""

    def __init__(self, remit: "Surface", run_id: str) -> None:
        self.parent = remit.runs.parent(run_id)
        self.waiting = remit.runs.waiting(run_id)
        self.state = remit.runs.state(run_id)
        self.messages = remit.runs.messages(run_id)
        self.children = remit.runs.children(run_id)

    def as_json(self) -> dict[str, Any]:
        """The fields `remit show --json` adds to those of `GET /runs/{id}`."""
        from remit.serve.message_routes import ChildView, MessageView

        return {
            "state": self.state,
            "messages": [MessageView.model_validate(each.__dict__) for each in self.messages],
            "children": [ChildView.of(each) for each in self.children],
        }

    def head(self, *, full: bool) -> None:
        """Under the run's own lines: its parent, what it waits for, what it published."""
        if self.parent is not None:
            link = self.parent
            detached = ", detached" if link.detached else ""
            out.print(
                Text(
                    f"  parent {link.parent_run_id} (its step {link.step_id}, key "
                    f"{printable(link.key)}{detached})"
                ),
                soft_wrap=True,
            )
        for wait in self.waiting:
            out.print(styled_wait(wait), soft_wrap=True)
        for line in _state_lines(self.state, full=full):
            out.print(Text(f"  state  {line}"), soft_wrap=True)

    def tables(self, *, full: bool) -> None:
        """After the ledger: its messages and its child runs, when it has any."""
        if self.messages:
            out.print(_messages_table(self.messages, full=full))
        if self.children:
            out.print(_children_table(self.children))


def styled_wait(wait: "Waiting") -> Text:
    """`waits for a message on paid (step 2), until 2026-12-06 09:00:00`, or for child runs."""
    if wait.kind == "message":
        until = "" if wait.deadline is None else f", until {moment(wait.deadline)}"
        said = f"a message on {printable(wait.topic or '')} (step {wait.step_id}){until}"
    else:
        said = f"its child runs {', '.join(wait.children)} (step {wait.step_id})"
    return Text.assemble("  ", ("waits for", "cyan"), f" {said}")


def _messages_table(found: list["Message"], *, full: bool) -> PlainTable:
    table = PlainTable(box=None, title="messages", title_justify="left")
    for column in ("seq", "topic", "status", "sent by", "sent", "key", "payload"):
        table.add_column(column, overflow="fold")
    for each in found:
        payload = shortened(json.dumps(each.payload), full=full, width=80)
        if each.error:
            payload = f"{payload}: {shortened(each.error, full=full)}"
        table.add_row(
            str(each.seq),
            each.topic,
            status_text(each.status),
            each.sent_by,
            moment(each.sent_at),
            each.key or "-",
            payload,
        )
    return table


def _children_table(found: list["Child"]) -> PlainTable:
    table = PlainTable(box=None, title="children", title_justify="left")
    for column in ("run", "workflow", "key", "status", "step", "created"):
        table.add_column(column, overflow="fold")
    for each in found:
        table.add_row(
            each.run_id,
            each.workflow,
            each.key + (" (detached)" if each.detached else ""),
            status_text(each.status),
            str(each.step_id),
            moment(each.created_at),
        )
    whole_ids(table, 0)
    return table
