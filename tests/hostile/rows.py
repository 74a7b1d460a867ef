"""The probes: on each surface, hostile inputs and what each must be refused with.

A CLI row is the arguments (`{files}`, `{approval}` and `{run}` filled in), what standard input
holds (a file's name under `{files}`), the environment it changes, the exit code (1: refused
input, 2: usage) and a fragment of what stderr says. An HTTP row is the request and the status
and a fragment of the error body. A client row is a call on `remit.Client` and the error it
raises. None of them may write a row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from remit import Client

MiB = 1024 * 1024
NUL = "\x00"
ESC = "\x1b"


@dataclass(frozen=True)
class CliProbe:
    args: tuple[str, ...]
    code: int
    says: str
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def cli(*args: str, code: int = 1, says: str, stdin: str | None = None, **env: str) -> CliProbe:
    return CliProbe(args, code, says, stdin, env)


LISTINGS = [
    ("runs",),
    ("ledger",),
    ("approvals",),
    ("tasks",),
    ("denials",),
    ("deadlines",),
    ("budgets",),
    ("activity", "invoice", "inv_1003"),
    ("data", "ar.contacts", "list"),
]

DEEP = "nested more than 100 levels deep (REMIT_MAX_JSON_DEPTH)"
HUGE = "an integer of more than 4,300 digits"
# Each option that takes JSON, given 100,000 levels and a 5,000-digit integer from a file.
PATHOLOGICAL = [
    pytest.param(
        cli(*args, f"@{{files}}/{name}.json", says=says),
        id=f"{name}-{args[0]}-{args[-1].removeprefix('--')}",
    )
    for args in [
        ("start", "ar.write-off", "--input"),
        ("call", "data.ar.contacts.put", "--input"),
        ("approve", "{approval}", "--edit"),
        ("task", "resolve", "tsk_nope", "--done", "--output"),
        ("policies", "explain", "start", "ar.write-off", "--context"),
    ]
    for name, says in (("deep", DEEP), ("huge-int", HUGE))
]

CLI = [
    *PATHOLOGICAL,
    pytest.param(
        cli("start", "ar.write-off", "--input", "-", stdin="deep.json", says=DEEP),
        id="deep-stdin",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003", "reason": ' + "[" * 101 + "]" * 101 + "}",
            says=DEEP,
        ),
        id="just-too-deep",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003",',
            says="--input is not valid JSON: Expecting",
        ),
        id="malformed-json",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            "@{files}/broken.json",
            says="is not valid JSON: Expecting value at line 3, column 13",
        ),
        id="malformed-json-file",
    ),
    pytest.param(
        cli(
            "call",
            "data.ar.contacts.put",
            "--input",
            "-",
            stdin="broken.json",
            says="--input - (standard input) is not valid JSON",
        ),
        id="malformed-json-stdin",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": NaN}',
            says="holds NaN, which is no JSON value",
        ),
        id="json-nan",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            "@{files}/missing.json",
            says="missing.json: the file cannot be read: No such file",
        ),
        id="missing-file",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": 3}',
            says="invoice_id: Input should be a valid string",
        ),
        id="wrong-type",
    ),
    pytest.param(
        cli(
            "call",
            "payments.invoices.get",
            "--input",
            "[1, 2]",
            says="--input must be a JSON object of the op's fields",
        ),
        id="wrong-type-call",
    ),
    pytest.param(
        cli(
            "approve",
            "{approval}",
            "--edit",
            '"120"',
            says="--edit must be a JSON object of fields",
        ),
        id="wrong-type-edit",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            "@{files}/big-input.json",
            says="over the 2 MiB limit (REMIT_MAX_INPUT_BYTES)",
        ),
        id="over-cap-file",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            "-",
            stdin="big-input.json",
            says="over the 2 MiB limit (REMIT_MAX_INPUT_BYTES)",
        ),
        id="over-cap-stdin",
    ),
    pytest.param(
        cli(
            "run",
            "ar.write-off",
            "--input",
            "-",
            stdin="big-input.json",
            says="(REMIT_MAX_INPUT_BYTES)",
        ),
        id="over-cap-run",
    ),
    pytest.param(
        cli(
            "data",
            "ar.contacts",
            "put",
            "--input",
            "@{files}/big-record.json",
            says="(REMIT_MAX_OP_BYTES)",
        ),
        id="over-cap-record",
    ),
    pytest.param(
        cli(
            "approve",
            "{approval}",
            "--edit",
            "@{files}/big-edits.json",
            says="(REMIT_MAX_DRAFT_BYTES)",
        ),
        id="over-cap-edits",
    ),
    pytest.param(
        cli("reject", "{approval}", "--reason", "y" * 5000, says="REMIT_MAX_REASON_CHARS"),
        id="over-cap-reason",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003", "reason": "a\\u0000b"}',
            says="NUL character",
        ),
        id="nul-in-input",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003", "reason": "\\ud800"}',
            says="holds \\ud800, half of a surrogate pair",
        ),
        id="lone-surrogate-in-input",
    ),
    pytest.param(
        cli(
            "call",
            "data.ar.contacts.put",
            "--input",
            '{"email": "a@b.example", "note": "\\u0000"}',
            says="NUL character",
        ),
        id="nul-in-op-input",
    ),
    pytest.param(
        cli(
            "approve",
            "{approval}",
            "--edit",
            '{"amount": 100, "memo": "\\u0000"}',
            says="NUL character",
        ),
        id="nul-in-edits",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003\\u0000"}',
            says="NUL character",
        ),
        id="nul-in-record-id",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003"}',
            "--as",
            f"user:ann{ESC}[2J",
            says="no control characters",
        ),
        id="control-in-principal",
    ),
    pytest.param(
        cli(
            "call",
            "data.ar.contacts.put",
            "--input",
            '{"email": "k@b.example"}',
            "--key",
            f"key{ESC}1",
            says="must be 1 to 100 printable characters",
        ),
        id="control-in-key",
    ),
    pytest.param(
        cli("approve", "{approval}", "--key", "two words", says="key"),
        id="space-in-decision-key",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv\\u001b[2J"}',
            says="control characters",
        ),
        id="control-in-record-id",
    ),
    pytest.param(
        cli(
            "data",
            "ar.contacts",
            "put",
            "--input",
            '{"email": "x\\u001b[31m@b.example"}',
            says="holds control characters",
        ),
        id="control-in-record-key",
    ),
    pytest.param(cli("show", "run_nope", says="no run `run_nope`"), id="unknown-run"),
    pytest.param(cli("cancel", "run_nope", says="no run `run_nope`"), id="unknown-run-cancel"),
    pytest.param(cli("approve", "apr_nope", says="apr_nope"), id="unknown-approval"),
    pytest.param(
        cli("approvals", "withdraw", "apr_nope", says="apr_nope"), id="unknown-approval-withdraw"
    ),
    pytest.param(
        cli("approvals", "withdraw", "{approval}", "--key", "two words", says="key"),
        id="space-in-withdraw-key",
    ),
    pytest.param(
        cli(
            "approvals",
            "withdraw",
            "{approval}",
            "--reason",
            "y" * 5000,
            says="REMIT_MAX_REASON_CHARS",
        ),
        id="over-cap-withdraw-reason",
    ),
    pytest.param(
        cli(
            "approvals",
            "withdraw",
            "{approval}",
            "--as",
            "user:carol",
            says="only they or an admin (REMIT_ADMINS) may withdraw it, not user:carol",
        ),
        id="withdraw-by-someone-else",
    ),
    pytest.param(cli("task", "resolve", "tsk_nope", "--done", says="tsk_nope"), id="unknown-task"),
    pytest.param(
        cli("start", "write-everything", says="has no workflow `write-everything`"),
        id="unknown-workflow",
    ),
    pytest.param(
        cli("call", "payments.invoices.nuke", says="payments.invoices.nuke"), id="unknown-op"
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003"}',
            "--as",
            "",
            code=2,
            says="Invalid value for '--as'",
        ),
        id="empty-principal",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003"}',
            "--as",
            "   ",
            code=2,
            says="Invalid value for '--as'",
        ),
        id="blank-principal",
    ),
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003"}',
            says="REMIT_AS is set but empty",
            REMIT_AS="",
        ),
        id="empty-principal-variable",
    ),
    *[
        pytest.param(
            cli(*listing, "--limit", limit, code=2, says="Invalid value for '--limit'"),
            id=f"limit-{limit}-{listing[0]}",
        )
        for listing in LISTINGS
        for limit in ("0", "-1")
    ],
    pytest.param(
        cli(
            "start",
            "ar.write-off",
            "--input",
            '{"invoice_id": "inv_1003", "amount": 1}',
            says="amount",
        ),
        id="unknown-input-field",
    ),
    pytest.param(
        cli(
            "activity",
            "invoice",
            "inv_1003",
            "--after",
            str(2**40),
            code=2,
            says="Invalid value for '--after'",
        ),
        id="out-of-range-after",
    ),
]


@dataclass(frozen=True)
class HttpProbe:
    method: str
    path: str
    status: int
    says: str
    body: Any = None
    content: str | None = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None


def http(method: str, path: str, status: int, says: str, **request: Any) -> HttpProbe:
    return HttpProbe(method, path, status, says, **request)


START = "/runs"
DECIDE = "/approvals/{approval}/decision"
WITHDRAW = "/approvals/{approval}/withdraw"
KEY = {"Idempotency-Key": "{key}"}  # a new key for each request
HTTP_LISTINGS = [
    "/runs",
    "/ledger",
    "/approvals",
    "/tasks",
    "/denials",
    "/audit",
    "/deadlines",
    "/budgets",
]

HTTP = [
    pytest.param(
        http(
            "POST",
            START,
            422,
            DEEP,
            content='{"workflow": "ar.write-off", "input": ' + "[" * 100_000 + "]" * 100_000 + "}",
        ),
        id="deep-json",
    ),
    pytest.param(
        http(
            "POST",
            START,
            422,
            HUGE,
            content='{"workflow": "ar.write-off", "input": {"n": ' + "9" * 5000 + "}}",
        ),
        id="huge-int",
    ),
    pytest.param(
        http(
            "POST",
            DECIDE,
            422,
            DEEP,
            content='{"decision": "approved", "edits": {"memo": ' + "[" * 150 + "]" * 150 + "}}",
            headers=KEY,
        ),
        id="deep-edits",
    ),
    pytest.param(
        http("POST", START, 422, "JSON", content='{"workflow": "ar.write-off", "input": {'),
        id="malformed-json",
    ),
    pytest.param(
        http(
            "POST",
            START,
            422,
            "invoice_id",
            body={"workflow": "ar.write-off", "input": {"invoice_id": 3}},
        ),
        id="wrong-type",
    ),
    pytest.param(
        http("POST", START, 422, "input", body={"workflow": "ar.write-off", "input": [1, 2]}),
        id="wrong-type-input",
    ),
    pytest.param(
        http(
            "POST", DECIDE, 422, "edits", body={"decision": "approved", "edits": "120"}, headers=KEY
        ),
        id="wrong-type-edits",
    ),
    pytest.param(
        http(
            "POST",
            START,
            413,
            "REMIT_MAX_INPUT_BYTES",
            body={
                "workflow": "ar.write-off",
                "input": {"invoice_id": "inv_1003", "reason": "r" * (3 * MiB)},
            },
        ),
        id="over-cap-input",
    ),
    pytest.param(
        http(
            "POST",
            START,
            413,
            "REMIT_MAX_BODY_BYTES",
            body={
                "workflow": "ar.write-off",
                "input": {"invoice_id": "inv_1003", "reason": "r" * (5 * MiB)},
            },
        ),
        id="over-cap-body",
    ),
    pytest.param(
        http(
            "POST",
            "/calls",
            413,
            "REMIT_MAX_OP_BYTES",
            body={
                "op": "data.ar.contacts.put",
                "input": {"email": "big@example.com", "note": "n" * (3 * MiB)},
            },
        ),
        id="over-cap-op-input",
    ),
    pytest.param(
        http(
            "POST",
            DECIDE,
            413,
            "REMIT_MAX_DRAFT_BYTES",
            body={"decision": "approved", "edits": {"amount": 100, "memo": "m" * (300 * 1024)}},
            headers=KEY,
        ),
        id="over-cap-edits",
    ),
    pytest.param(
        http(
            "POST",
            DECIDE,
            422,
            "REMIT_MAX_REASON_CHARS",
            body={"decision": "rejected", "reason": "y" * 5000},
            headers=KEY,
        ),
        id="over-cap-reason",
    ),
    pytest.param(
        http(
            "POST",
            START,
            422,
            "NUL",
            body={
                "workflow": "ar.write-off",
                "input": {"invoice_id": "inv_1003", "reason": f"a{NUL}"},
            },
        ),
        id="nul-in-input",
    ),
    pytest.param(
        http(
            "POST",
            START,
            422,
            "surrogate",
            content='{"workflow": "ar.write-off", "input": {"invoice_id": "inv_1003", "reason": "\\ud800"}}',
        ),
        id="lone-surrogate-in-input",
    ),
    pytest.param(
        http("POST", START, 422, "NUL", body={"workflow": f"ar.write-off{NUL}", "input": {}}),
        id="nul-in-workflow",
    ),
    pytest.param(
        http(
            "POST",
            DECIDE,
            422,
            "NUL",
            body={"decision": "rejected", "reason": f"no{NUL}"},
            headers=KEY,
        ),
        id="nul-in-reason",
    ),
    pytest.param(
        http(
            "POST",
            "/calls",
            422,
            "NUL",
            body={"op": "data.ar.contacts.put", "input": {"email": f"a{NUL}@b.example"}},
        ),
        id="nul-in-op-input",
    ),
    pytest.param(
        http("POST", "/tokens", 422, "for", body={"for": f"user:ann{ESC}[2J"}),
        id="control-in-principal",
    ),
    pytest.param(
        http(
            "POST",
            START,
            422,
            "control characters",
            body={"workflow": "ar.write-off", "input": {"invoice_id": f"inv{ESC}[2J"}},
        ),
        id="control-in-record-id",
    ),
    pytest.param(
        http(
            "POST",
            "/calls",
            422,
            "holds control characters",
            body={"op": "data.ar.contacts.put", "input": {"email": f"x{ESC}[31m@b.example"}},
        ),
        id="control-in-record-key",
    ),
    pytest.param(
        http(
            "POST",
            DECIDE,
            400,
            "Idempotency-Key",
            body={"decision": "rejected"},
            headers={"Idempotency-Key": "two words"},
        ),
        id="space-in-key",
    ),
    pytest.param(http("GET", "/runs/run_nope", 404, "run_nope"), id="unknown-run"),
    pytest.param(
        http(
            "POST",
            "/approvals/apr_nope/decision",
            404,
            "apr_nope",
            body={"decision": "rejected"},
            headers=KEY,
        ),
        id="unknown-approval",
    ),
    pytest.param(
        http("POST", "/approvals/apr_nope/withdraw", 404, "apr_nope", headers=KEY),
        id="unknown-approval-withdraw",
    ),
    pytest.param(
        http("POST", WITHDRAW, 422, "10000", body={"reason": "y" * 10_001}, headers=KEY),
        id="over-cap-withdraw-reason",
    ),
    pytest.param(
        http("POST", WITHDRAW, 422, "NUL", body={"reason": f"no{NUL}"}, headers=KEY),
        id="nul-in-withdraw-reason",
    ),
    pytest.param(
        http(
            "POST",
            WITHDRAW,
            400,
            "Idempotency-Key",
            body={"reason": "mine"},
            headers={"Idempotency-Key": "two words"},
        ),
        id="space-in-withdraw-key",
    ),
    pytest.param(
        http(
            "POST", "/tasks/tsk_nope/resolution", 404, "tsk_nope", body={"done": False}, headers=KEY
        ),
        id="unknown-task",
    ),
    pytest.param(
        http(
            "POST",
            START,
            404,
            "write-everything",
            body={"workflow": "write-everything", "input": {}},
        ),
        id="unknown-workflow",
    ),
    pytest.param(http("POST", "/tokens", 422, "for", body={"for": ""}), id="empty-principal"),
    *[
        pytest.param(
            http("GET", path, 422, "limit", params={"limit": limit}),
            id=f"limit-{limit}-{path.strip('/')}",
        )
        for path in HTTP_LISTINGS
        for limit in (0, -1)
    ],
    pytest.param(
        http(
            "POST",
            START,
            422,
            "amount",
            body={"workflow": "ar.write-off", "input": {"invoice_id": "inv_1003", "amount": 1}},
        ),
        id="unknown-input-field",
    ),
    pytest.param(
        http(
            "GET",
            "/records/invoice/inv_1003/activity",
            422,
            "after",
            params={"after": str(2**70)},
        ),
        id="out-of-range-after",
    ),
    pytest.param(
        http(
            "POST",
            START,
            422,
            "by",
            body={
                "workflow": "ar.write-off",
                "input": {"invoice_id": "inv_1003"},
                "by": "user:sam",
            },
        ),
        id="unknown-body-field",
    ),
]


@dataclass(frozen=True)
class ClientProbe:
    call: Callable[[Client, str], Any]
    error: str
    says: str


def client(call: Callable[[Client, str], Any], error: str, says: str) -> ClientProbe:
    """`call(client, approval_id)` must raise the error class named `error`, saying `says`."""
    return ClientProbe(call, error, says)


CLIENT = [
    pytest.param(
        client(
            lambda c, _: c.runs.start_row(
                "ar.write-off", {"invoice_id": "inv_1003", "reason": _nest(150)}
            ),
            "InputInvalid",
            DEEP,
        ),
        id="deep-input",
    ),
    pytest.param(
        client(
            lambda c, _: c.calls.call(
                "data.ar.contacts.put", {"email": "a@b.example", "note": 10**5000}
            ),
            "InputInvalid",
            HUGE,
        ),
        id="huge-int-op-input",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row("ar.write-off", {"invoice_id": 3}),
            "InputInvalid",
            "invoice_id",
        ),
        id="wrong-type",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row(
                "ar.write-off", {"invoice_id": "inv_1003", "reason": "r" * (3 * MiB)}
            ),
            "TooLarge",
            "REMIT_MAX_INPUT_BYTES",
        ),
        id="over-cap-input",
    ),
    pytest.param(
        client(
            lambda c, _: c.calls.call(
                "data.ar.contacts.put", {"email": "big@example.com", "note": "n" * (3 * MiB)}
            ),
            "TooLarge",
            "REMIT_MAX_OP_BYTES",
        ),
        id="over-cap-op-input",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.decide(
                [a],
                "approved",
                key="probe-1",
                edits={a: {"amount": 100, "memo": "m" * (300 * 1024)}},
            ),
            "TooLarge",
            "REMIT_MAX_DRAFT_BYTES",
        ),
        id="over-cap-edits",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.decide([a], "rejected", key="probe-2", reason="y" * 5000),
            "TooLarge",
            "REMIT_MAX_REASON_CHARS",
        ),
        id="over-cap-reason",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row(
                "ar.write-off", {"invoice_id": "inv_1003", "reason": f"a{NUL}"}
            ),
            "InputInvalid",
            "NUL character",
        ),
        id="nul-in-input",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row(
                "ar.write-off", {"invoice_id": "inv_1003", "reason": "\ud800"}
            ),
            "InputInvalid",
            "surrogate",
        ),
        id="lone-surrogate-in-input",
    ),
    pytest.param(
        client(
            lambda c, _: c.calls.call("data.ar.contacts.put", {"email": f"a{NUL}@b.example"}),
            "InputInvalid",
            "NUL character",
        ),
        id="nul-in-op-input",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.decide([a], "rejected", key="probe-3", reason=f"no{NUL}"),
            "InputInvalid",
            "NUL character",
        ),
        id="nul-in-reason",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.decide(
                [a], "approved", key="probe-4", edits={a: {"amount": 100, "memo": f"{NUL}"}}
            ),
            "InputInvalid",
            "NUL character",
        ),
        id="nul-in-edits",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row(
                "ar.write-off", {"invoice_id": "inv_1003"}, by=f"user:ann{ESC}[2J"
            ),
            "RemitError",
            "no control characters",
        ),
        id="control-in-principal",
    ),
    pytest.param(
        client(
            lambda c, _: c.calls.call(
                "data.ar.contacts.put", {"email": "k@b.example"}, key=f"key{ESC}1"
            ),
            "RemitError",
            "key",
        ),
        id="control-in-key",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row("ar.write-off", {"invoice_id": f"inv{ESC}[2J"}),
            "RemitError",
            "control characters",
        ),
        id="control-in-record-id",
    ),
    pytest.param(
        client(
            lambda c, _: c.calls.call("data.ar.contacts.put", {"email": f"x{ESC}[31m@b.example"}),
            "InputInvalid",
            "holds control characters",
        ),
        id="control-in-record-key",
    ),
    pytest.param(
        client(lambda c, _: c.runs.get("run_nope"), "RunNotFound", "run_nope"), id="unknown-run"
    ),
    pytest.param(
        client(
            lambda c, _: c.approvals.decide(["apr_nope"], "rejected", key="probe-5"),
            "RemitError",
            "apr_nope",
        ),
        id="unknown-approval",
    ),
    pytest.param(
        client(lambda c, _: c.approvals.withdraw("apr_nope"), "RemitError", "apr_nope"),
        id="unknown-approval-withdraw",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.withdraw(a, reason="y" * 5000),
            "TooLarge",
            "REMIT_MAX_REASON_CHARS",
        ),
        id="over-cap-withdraw-reason",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.withdraw(a, reason=f"no{NUL}"),
            "InputInvalid",
            "NUL character",
        ),
        id="nul-in-withdraw-reason",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.withdraw(a, key=f"key{ESC}1"), "RemitError", "decision_key"
        ),
        id="control-in-withdraw-key",
    ),
    pytest.param(
        client(
            lambda c, a: c.approvals.withdraw(a, by="user:mallory"),
            "DecisionRefused",
            "only they or an admin (REMIT_ADMINS) may withdraw it, not user:mallory",
        ),
        id="withdraw-by-someone-else",
    ),
    pytest.param(
        client(
            lambda c, _: c.tasks.resolve("tsk_nope", done=False, key="probe-6"),
            "RemitError",
            "tsk_nope",
        ),
        id="unknown-task",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row("write-everything", {}),
            "UnknownWorkflow",
            "write-everything",
        ),
        id="unknown-workflow",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row("ar.write-off", {"invoice_id": "inv_1003"}, by=""),
            "RemitError",
            "principal",
        ),
        id="empty-principal",
    ),
    pytest.param(
        client(lambda c, _: c.runs.list(limit=0), "RemitError", "limit"), id="limit-0-runs"
    ),
    pytest.param(
        client(lambda c, _: c.runs.list(limit=-1), "RemitError", "limit"), id="limit-negative-runs"
    ),
    pytest.param(
        client(lambda c, _: c.calls.ledger(limit=0), "RemitError", "limit"), id="limit-0-ledger"
    ),
    pytest.param(
        client(lambda c, _: c.approvals.list(limit=-1), "RemitError", "limit"),
        id="limit-negative-approvals",
    ),
    pytest.param(
        client(lambda c, _: c.tasks.list(limit=0), "RemitError", "limit"), id="limit-0-tasks"
    ),
    pytest.param(
        client(lambda c, _: c.ops.denials(limit=0), "RemitError", "limit"), id="limit-0-denials"
    ),
    pytest.param(
        client(lambda c, _: c.ops.deadlines(limit=-5), "RemitError", "limit"),
        id="limit-negative-deadlines",
    ),
    pytest.param(
        client(
            lambda c, _: c.runs.start_row("ar.write-off", {"invoice_id": "inv_1003", "amount": 1}),
            "InputInvalid",
            "amount",
        ),
        id="unknown-input-field",
    ),
    pytest.param(
        client(
            lambda c, _: c.records.activity("invoice", "inv_1003", after=2**70),
            "RemitError",
            "after",
        ),
        id="out-of-range-after",
    ),
]


def _nest(levels: int) -> Any:
    nested: Any = []
    for _ in range(levels):
        nested = [nested]
    return nested
