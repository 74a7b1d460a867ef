"""The script the fake model follows when Acme's operator agent asks it: a function model, for
the demo and the tests, on fakes. A real model (`LLM_API_KEY`) needs none of this.

It reads the conversation as a model would (the person's last question, the tools' answers
since) and knows three questions: why an invoice's run waits ("why is the write-off of inv_1003
waiting?"), which it answers from `find_runs`, `why_waiting` and `explain_policy`; "approve it at
400", which proposes deciding the gate it found, as a draft the person confirms; and "chase
inv_1001 at ap@northwind.example", which proposes starting a chase (a start may be tried in a
sandbox first). Anything else gets a line saying what it can do. Asked without tools (a workflow's `ctx.llm`), it leaves
the request to the fake's echo.
"""

from __future__ import annotations

import json
import re
from typing import Any

from remit.connectors.llm import ChatRequest, FakeReply, ToolCall

_INVOICE = re.compile(r"\binv_\w+")
_APPROVE = re.compile(r"\bapprove it at (\d+(?:\.\d{1,2})?)", re.IGNORECASE)
_CHASE = re.compile(r"\bchase (inv_\w+) at (\S+@[\w.-]+\w)", re.IGNORECASE)


def respond(request: ChatRequest) -> FakeReply | None:
    if not request.tools:
        return None
    asked = _last_question(request)
    answers = _answers_since_question(request)
    invoice = _INVOICE.search(asked)
    approve = _APPROVE.search(asked)
    if approve is not None:
        gate = _last_gate(request)
        if gate is None:
            return FakeReply("Which approval? Ask me why an invoice's run waits first.")
        cents = round(float(approve.group(1)) * 100)
        return _call(
            request,
            "decide",
            approval_id=gate["approval_id"],
            decision="approved",
            edit={"amount": cents},
            reason=f"settled at {cents / 100:.2f}",
        )
    chase = _CHASE.search(asked)
    if chase is not None:
        return _call(
            request,
            "start_run",
            workflow="ar.chase-invoice",
            input={"invoice_id": chase.group(1), "customer_email": chase.group(2)},
        )
    if invoice is not None and "wait" in asked.lower():
        return _why_waiting(request, invoice.group(0), answers)
    return FakeReply(
        'I can say why an invoice\'s run waits ("why is the write-off of inv_1003 waiting?") '
        'and propose a decision ("approve it at 400") or a chase ("chase inv_1001 at '
        'ap@northwind.example"), which you then confirm.'
    )


def _why_waiting(request: ChatRequest, invoice: str, answers: dict[str, Any]) -> FakeReply:
    if "find_runs" not in answers:
        return _call(request, "find_runs", record=f"invoice/{invoice}", status="waiting")
    runs = answers["find_runs"]
    if not isinstance(runs, list) or not runs:
        return FakeReply(f"I find no waiting run of {invoice} that you may read.")
    run = runs[0]
    if "why_waiting" not in answers:
        return _call(request, "why_waiting", run_id=run["run_id"])
    gates = [w for w in answers["why_waiting"].get("waiting_for", []) if w["kind"] == "approval"]
    if not gates:
        return FakeReply(f"Run {run['run_id']} ({run['workflow']}) waits, but at no approval.")
    gate = gates[0]
    if "explain_policy" not in answers:
        return _call(
            request,
            "explain_policy",
            principal=run["started_by"],
            action="decide",
            resource=gate["type"],
            context={"decision": "approved", "workflow": run["workflow"], "draft": gate["draft"]},
        )
    verdict = answers["explain_policy"]
    may = "may" if verdict.get("allowed") else "may not"
    rejecting = verdict.get("if_rejected") or {}
    instead = (
        f" They may reject it: {rejecting['reason']}, which limits what they may approve."
        if rejecting.get("allowed")
        else ""
    )
    return FakeReply(
        f"The {run['workflow']} of {invoice} (run {run['run_id']}) waits at the approval "
        f"{gate['approval_id']}: {gate['title']}. It is assigned to {gate['assignee'] or 'no one'}. "
        f"{run['started_by']}, who started it, {may} approve it as drafted: {verdict['reason']}."
        f"{instead}"
    )


def _call(request: ChatRequest, tool: str, **args: Any) -> FakeReply:
    # Unique in the conversation, which grows by at least a message a call.
    call_id = f"call_{len(request.messages)}_{tool}"
    return FakeReply(tool_calls=[ToolCall(id=call_id, name=tool, arguments=json.dumps(args))])


def _last_question(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.content
    return ""


def _answers_since_question(request: ChatRequest) -> dict[str, Any]:
    """The tools' answers after the person's last question, by tool."""
    since: list[Any] = []
    for message in reversed(request.messages):
        if message.role == "user":
            break
        since.insert(0, message)
    return _answers(since)


def _answers(messages: list[Any]) -> dict[str, Any]:
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    found: dict[str, Any] = {}
    for message in messages:
        if message.role == "tool" and message.tool_call_id in names:
            try:
                found[names[message.tool_call_id]] = json.loads(message.content)
            except ValueError:
                found[names[message.tool_call_id]] = message.content
    return found


def _last_gate(request: ChatRequest) -> dict[str, Any] | None:
    """The last approval a `why_waiting` answer in the conversation named."""
    names = {call.id: call.name for m in request.messages for call in m.tool_calls}
    gate = None
    for message in request.messages:
        if message.role == "tool" and names.get(message.tool_call_id or "") == "why_waiting":
            try:
                waits = json.loads(message.content).get("waiting_for", [])
            except ValueError:
                continue
            gates = [w for w in waits if w.get("kind") == "approval"]
            gate = gates[0] if gates else gate
    return gate
