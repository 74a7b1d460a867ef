"""Who may do what: an app's Cedar policies, checked in-process with `cedarpy`.

An app with a `policies/` folder is governed by the `*.cedar` files in it, deny by default: an
action goes ahead only when some `permit` matches it and no `forbid` does. Every act a person or
an agent takes is one of these actions, each on its own kind of resource:

    Action::"start"         on Workflow::"<name>"         context { input }
    Action::"cancel"        on Workflow::"<name>"         context { input, status }
    Action::"retry"         on Workflow::"<name>"         context { input, status }
    Action::"resolve"       on Op::"<vendor.resource.op>" context { done, workflow, input }
    Action::"call"          on Op::"<vendor.resource.op>" context { input }
    Action::"decide"        on ApprovalType::"<name>"     context { decision, workflow, input,
                                                                    draft, op, call }
    Action::"withdraw"      on ApprovalType::"<name>"     context { requester, is_requester,
                                                                    workflow, input, draft }
    Action::"pause"         on App::"<app>"               context { }
    Action::"resume"        on App::"<app>"               context { }
    Action::"reconcile"     on App::"<app>"               context { }
    Action::"manage_tokens" on App::"<app>"               context { verb, subject }
    Action::"manage_schedules" on Workflow::"<name>"      context { verb }
    Action::"send"          on Workflow::"<name>"         context { topic }
    Action::"set_secret"    on Secret::"<NAME>"           context { }
    Action::"delete_secret" on Secret::"<NAME>"           context { }
    Action::"set_budget"    on Budget::"<scope>"          context { period, limit }

and what they may read, through the HTTP API and the web console (`remit/reads.py`):

    Action::"read_runs"       on Workflow::"<name>"     context { }
    Action::"read_approvals"  on ApprovalType::"<name>" context { }
    Action::"read_operations" on App::"<app>"           context { }
    Action::"read_chats"      on App::"<app>"           context { owner }

(`read_chats` is reading another person's chats with the operator agent; one's own needs none.)

Principals are `User::"<name>"` and `Agent::"<name>"` (`user:<name>` and `agent:<name>` on the
command line), members of the groups `policies/principals.toml` lists. The Cedar schema is
derived from the app itself (its workflows' inputs, its ops' inputs, its approval types'
drafts), so it cannot drift from the code; `remit policies schema` prints it.

A policy set that does not parse or validate does not stop the app from loading: it refuses
every action, with the message naming the file and line, until it is fixed.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import threading
import tomllib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from remit.core.errors import RemitError

log = logging.getLogger("remit.policy")

Action = Literal[
    "start",
    "call",
    "decide",
    "withdraw",
    "retry",
    "resolve",
    "cancel",
    "pause",
    "resume",
    "reconcile",
    "manage_tokens",
    "manage_schedules",
    "send",
    "set_secret",
    "delete_secret",
    "set_budget",
    "read_runs",
    "read_approvals",
    "read_operations",
    "read_chats",
]
ACTIONS: tuple[Action, ...] = typing.get_args(Action)
RESOURCE_TYPES: dict[Action, str] = {
    "start": "Workflow",
    "call": "Op",
    "decide": "ApprovalType",
    "withdraw": "ApprovalType",
    "retry": "Workflow",
    "resolve": "Op",
    "cancel": "Workflow",
    "pause": "App",
    "resume": "App",
    "reconcile": "App",
    "manage_tokens": "App",
    "manage_schedules": "Workflow",
    "send": "Workflow",
    "set_secret": "Secret",
    "delete_secret": "Secret",
    "set_budget": "Budget",
    "read_runs": "Workflow",
    "read_approvals": "ApprovalType",
    "read_operations": "App",
    "read_chats": "App",
}
PRINCIPAL_TYPES = {"user": "User", "agent": "Agent"}
PRINCIPALS_FILE = "principals.toml"
# The annotation that turns a permitted direct call into a run waiting at an approval.
HOLD = "hold"
# The built-in workflow and approval type a held call waits in.
HELD = "call"
# The built-in workflow of the operator agent's turns (`remit.agent`): its runs hold a person's
# chat, so they are read as the chat is (`remit.reads`), not by `read_runs`.
CHAT = "chat"
# Principals that are remit itself (the expiry sweep, schedules): never checked, and refused
# as `--as` or `by` on every surface.

_CEDAR_PRINCIPAL = re.compile(r'^(User|Agent)::"([^"\\]+)"$')
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,199}$")
# The answers a `Policy` keeps (see `Policy.check`): at most this many, each for a resource and
# a context (as Cedar JSON) of at most these many characters; a longer one is asked each time.
_KEPT = 4096
_KEPT_RESOURCE = 256
_KEPT_CONTEXT = 1024


class PolicyDenied(RemitError):
    """A policy refused an action. The message names the principal, action and resource."""

    def __init__(self, message: str, *, principal: str, action: str, resource: str) -> None:
        super().__init__(message)
        self.principal = principal
        self.action = action
        self.resource = resource


@dataclass(frozen=True)
class Principal:
    """Who acts: a person (`user:ann`) or an agent (`agent:ops-bot`)."""

    kind: str  # User or Agent
    name: str

    @classmethod
    def parse(cls, text: str) -> Principal:
        """`user:<name>`, `agent:<name>`, or Cedar's `User::"<name>"` / `Agent::"<name>"`."""
        matched = _CEDAR_PRINCIPAL.match(text)
        if matched:
            return cls(matched.group(1), matched.group(2))
        prefix, _, name = text.partition(":")
        kind = PRINCIPAL_TYPES.get(prefix)
        if kind is None or not _NAME.match(name):
            raise RemitError(
                f"`{text}` is not a principal policies know: act as `user:<name>` or "
                "`agent:<name>` (letters, digits and . _ @ + -), e.g. --as user:ann"
            )
        return cls(kind, name)

    @property
    def text(self) -> str:
        return f"{self.kind.lower()}:{self.name}"

    def uid(self) -> dict[str, str]:
        return {"type": self.kind, "id": self.name}


@dataclass(frozen=True)
class Verdict:
    """What the policies said: allowed or not, held for an approval or not, and why."""

    allowed: bool
    reason: str
    held: bool = False
    # The `@hold("...")` notes of the permits that held the call.
    hold_note: str = ""
    policies: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Answer:
    """What Cedar answered a request: the verdict, who asked (`user:ann`), and the errors it
    met evaluating the policies (logged with every answer)."""

    verdict: Verdict
    who: str
    errors: tuple[Any, ...]


@dataclass(frozen=True)
class _Statement:
    file: str
    line: int
    text: str


@dataclass
class Policy:
    """An app's policies, parsed and validated once; `check` asks Cedar in about 0.1 ms (0.2
    to 0.3 ms when its code is cold, as it is between database round trips), and answers a
    request it was asked before from what it kept, in a few µs.

    `Policy.open()` (an app with no `policies/` folder) allows everything and checks nothing.
    """

    enabled: bool = False
    problem: str | None = None
    folder: Path | None = None
    schema: dict[str, Any] = field(default_factory=dict)
    # Input fields two declarations type differently, which no context carries.
    left_out: list[str] = field(default_factory=list)
    _set: Any = None
    _entities: Any = None
    _where: dict[str, str] = field(default_factory=dict)
    _holds: dict[str, str] = field(default_factory=dict)
    _contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The people and agents `principals.toml` and the declared groups hold (`user:ann`, ...).
    members: list[str] = field(default_factory=list)
    # Each group `principals.toml` or the data files name, with the people and agents in it, directly or
    # through the groups it holds: who may decide a gate assigned to `group:<name>`.
    groups: dict[str, frozenset[str]] = field(default_factory=dict)
    # The actions some policy that may apply to them reads `context` in: for the others the
    # answer does not depend on the context (see `check`).
    _reads_context: frozenset[str] = frozenset(ACTIONS)
    # Answers already given: (principal as given, action, resource, the context as Cedar JSON
    # or None where no policy reads it) -> the answer, who asked, Cedar's evaluation errors.
    _answers: dict[tuple[str, str, str, str | None], _Answer] = field(
        default_factory=dict, repr=False, compare=False
    )
    _keeping: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def open(cls, declared_groups: Mapping[str, tuple[str, ...]] | None = None) -> Policy:
        """Policies that check nothing (an app with no `policies/` folder), knowing the groups
        the data files declare (`declared_groups`: each with its members), so that a gate
        assigned to one of them is decided by its members."""
        found: dict[tuple[str, str], set[tuple[str, str]]] = {}
        _declared_people(
            Catalog({}, {}, {}, declared_groups=declared_groups or {}), found, set(), ""
        )
        entities = _people_entities(found)
        return cls(enabled=False, members=_members(entities), groups=_groups(entities))

    @classmethod
    def load(cls, folder: Path, catalog: Catalog) -> Policy:
        """Read `folder`'s `*.cedar` files and `principals.toml` against the app's `catalog`.

        Never raises for a broken policy set: the result refuses every action and says why.
        """
        schema, contexts, left_out = build_schema(catalog)
        policy = cls(
            enabled=True, folder=folder, schema=schema, left_out=left_out, _contexts=contexts
        )
        try:
            policy._compile(folder, catalog)
        except _Broken as broken:
            policy.problem = str(broken)
            log.error("policies in %s refuse every action: %s", folder, broken)
        return policy

    def _compile(self, folder: Path, catalog: Catalog) -> None:
        # cedarpy is imported where policies are compiled or checked: an app without any does
        # not load it.
        import cedarpy

        statements: list[_Statement] = []
        files = sorted(folder.glob("*.cedar"))
        for file in files:
            name = f"{folder.name}/{file.name}"
            try:
                text = file.read_text()
            except (OSError, UnicodeDecodeError) as error:
                raise _Broken(f"{name}: cannot be read ({error})") from None
            for line, statement in split_statements(text):
                try:
                    cedarpy.PolicySet.from_str(statement)
                except ValueError as error:
                    raise _Broken(f"{name}:{line}: {_one_line(error)}") from None
                statements.append(_Statement(name, line, statement))
        text = "\n".join(s.text for s in statements)
        ids = [f"policy{i}" for i in range(len(statements))]
        self._where = {pid: f"{s.file}:{s.line}" for pid, s in zip(ids, statements, strict=True)}
        result = cedarpy.validate_policies(text, json.dumps(self.schema))
        if not result.validation_passed:
            problems = [
                f"{self._where.get(e.policy_id, '?')}: "
                + _one_line(e.error).replace(f"for policy `{e.policy_id}`, ", "")
                for e in result.errors
            ]
            raise _Broken("; ".join(problems))
        parsed = json.loads(cedarpy.policies_to_json_str(text)) if statements else {}
        self._reads_context = frozenset(
            action
            for body in parsed.get("staticPolicies", {}).values()
            if _uses_context(body.get("conditions", []))
            for action in _actions_of(body.get("action", {}))
        )
        for pid, body in parsed.get("staticPolicies", {}).items():
            for record, name in sorted(_context_reads(body)):
                what = _RECORDS.get(record)
                if what is None or f"{what} `{name}`" not in self.left_out:
                    continue
                # It would read as absent and never match: say so rather than let it lie dead.
                raise _Broken(
                    f"{self._where[pid]}: reads `context.{record}.{name}`, but the {what} "
                    f"`{name}` is typed two ways in the app, so no context carries it: make the "
                    "types agree, or rename one"
                )
            annotations = body.get("annotations", {})
            if HOLD not in annotations:
                continue
            if body.get("effect") != "permit" or not _only_call(body.get("action", {})):
                raise _Broken(
                    f"{self._where[pid]}: @hold belongs on a permit whose action is "
                    'action == Action::"call" (a held start or decision has no meaning)'
                )
            self._holds[pid] = annotations[HOLD] or ""
        if parsed.get("templates"):
            raise _Broken(
                "templates (policies with ?principal or ?resource) are not linked by remit: "
                "write each policy with its principal and resource"
            )
        self._set = cedarpy.PolicySet.from_str(text)
        entities = _entities(folder / PRINCIPALS_FILE, catalog)
        self.members = _members(entities)
        self.groups = _groups(entities)
        try:
            self._entities = cedarpy.Entities.from_json_str(json.dumps(entities))
        except ValueError as error:
            raise _Broken(
                f"{folder.name}/{PRINCIPALS_FILE}: the groups cannot be read as a hierarchy "
                f"(a group that is, through others, a member of itself?): {_one_line(error)}"
            ) from None

    def in_group(self, principal: str, group: str) -> bool:
        """Whether `principal` (`user:ann`) is in the group `group` (its name, without
        `group:`), directly or through a group within it."""
        return principal in self.groups.get(group, frozenset())

    @property
    def files(self) -> list[str]:
        if self.folder is None:
            return []
        return [f"{self.folder.name}/{file.name}" for file in sorted(self.folder.glob("*.cedar"))]

    def context(self, action: Action, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` as the action's Cedar context: only the attributes its schema types."""
        return _convert_record(self._contexts[action], values)

    def check(
        self, principal: str, action: Action, resource: str, context: Mapping[str, Any]
    ) -> Verdict:
        """Whether `principal` may take `action` on `resource`, with `context` (plain values,
        converted by the schema). Allowed without a look when the app has no policies."""
        if not self.enabled:
            return Verdict(True, "the app has no policies")
        if self.problem is not None:
            return Verdict(False, f"the policies are broken and refuse everything: {self.problem}")
        if action not in RESOURCE_TYPES:
            return Verdict(
                False, f"{action!r} is not an action policies know ({', '.join(ACTIONS)})"
            )
        try:
            converted = self.context(action, context)
        except _Unfit as unfit:
            try:
                Principal.parse(principal)  # who is not a principal is the first refusal
            except RemitError as error:
                return Verdict(False, str(error))
            attribute = ".".join(unfit.path)
            return Verdict(
                False, f"context.{attribute} cannot be given to the policies: {unfit.why}"
            )
        # The answer is Cedar's for this policy set and entity graph, both fixed when the
        # policies load (a reload is a new `Policy`), and this request: it is kept, keyed on the
        # request; on its context only where some policy that may apply to the action reads it.
        given = json.dumps(converted) if action in self._reads_context else None
        key = (principal, action, resource, given)
        keep = len(resource) <= _KEPT_RESOURCE and (given is None or len(given) <= _KEPT_CONTEXT)
        kept = self._answers.get(key) if keep else None
        if kept is None:
            try:
                who = Principal.parse(principal)
            except RemitError as error:
                return Verdict(False, str(error))
            kept = self._ask(who, action, resource, converted if given is None else given)
            if keep:
                with self._keeping:
                    if len(self._answers) >= _KEPT:
                        self._answers.clear()
                    self._answers[key] = kept
        if kept.errors:
            log.warning("evaluating policies for %s: %s", kept.who, list(kept.errors))
        return kept.verdict

    def _ask(
        self, who: Principal, action: Action, resource: str, context: dict[str, Any] | str
    ) -> _Answer:
        """Cedar's answer to `who` taking `action` on `resource` with `context` (converted,
        or as Cedar JSON), with the errors it met evaluating the policies."""
        import cedarpy

        request = {
            "principal": who.uid(),
            "action": {"type": "Action", "id": action},
            "resource": {"type": RESOURCE_TYPES[action], "id": resource},
            "context": context,
        }
        result = cedarpy.is_authorized(request, self._set, self._entities)
        matched = tuple(result.diagnostics.reasons)
        where = tuple(self._where.get(pid, pid) for pid in matched)
        errors = tuple(result.diagnostics.errors)
        if not result.allowed:
            if matched:
                refused = Verdict(False, f"forbidden by {', '.join(where)}", policies=where)
                return _Answer(refused, who.text, errors)
            return _Answer(Verdict(False, "no policy permits it"), who.text, errors)
        held = bool(matched) and all(pid in self._holds for pid in matched)
        held = held and action == "call"
        note = "; ".join(
            sorted({self._holds[pid] for pid in matched if held and self._holds.get(pid)})
        )
        reason = f"permitted by {', '.join(where)}"
        verdict = Verdict(True, reason, held=held, hold_note=note, policies=where)
        return _Answer(verdict, who.text, errors)


def denied(principal: str, action: str, resource: str, reason: str) -> PolicyDenied:
    what = RESOURCE_TYPES.get(action, "")  # type: ignore[call-overload]
    return PolicyDenied(
        f'{principal} may not {action} {what}::"{resource}": {reason}',
        principal=principal,
        action=action,
        resource=resource,
    )


class _Broken(Exception):
    """A policy set that does not load; the message names the file and line."""


def _one_line(error: object) -> str:
    return " ".join(str(error).split())


def _only_call(action: Mapping[str, Any]) -> bool:
    """Whether a policy's action scope is `Action::"call"` and nothing else."""
    if action.get("op") == "==":
        return bool(action.get("entity", {}).get("id") == "call")
    if action.get("op") == "in":
        entities = action.get("entities", [action.get("entity", {})])
        return bool(entities) and all(e.get("id") == "call" for e in entities)
    return False


def _actions_of(scope: Mapping[str, Any]) -> Iterable[str]:
    """The actions a policy's action scope (its JSON form) may match: every one unless it is
    `==` or `in` named actions. No action is a member of another (the schema declares no
    action groups, the entity graph holds no actions), so `in` matches only those named."""
    if scope.get("op") == "==":
        return [str(scope.get("entity", {}).get("id"))]
    if scope.get("op") == "in":
        entities = scope["entities"] if "entities" in scope else [scope.get("entity", {})]
        return [str(entity.get("id")) for entity in entities]
    return ACTIONS


def _uses_context(node: Any) -> bool:
    """Whether a policy's conditions (their JSON form) read `context` anywhere."""
    if isinstance(node, dict):
        return node.get("Var") == "context" or any(_uses_context(v) for v in node.values())
    if isinstance(node, list):
        return any(_uses_context(item) for item in node)
    return False


# The context records the app's declarations fill, and what fills each.
_RECORDS = {"input": "workflow input", "call": "op input", "draft": "approval draft"}


def _context_reads(node: Any) -> set[tuple[str, str]]:
    """Every `context.<record>.<name>` (or `context.<record> has <name>`) a policy reads, as
    (record, name), from its JSON form. In a call's context `input` holds the op's input."""
    found: set[tuple[str, str]] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in (".", "has") and isinstance(value, dict) and "attr" in value:
                left = value.get("left", {}).get(".", {})
                if left.get("left") == {"Var": "context"} and "attr" in left:
                    found.add((str(left["attr"]), str(value["attr"])))
                    if left["attr"] == "input":
                        found.add(("call", str(value["attr"])))
            found |= _context_reads(value)
    elif isinstance(node, list):
        for item in node:
            found |= _context_reads(item)
    return found


def split_statements(text: str) -> Iterator[tuple[int, str]]:
    """Each policy of a Cedar file with the line it starts on: split at every `;` outside a
    string or a comment. Trailing text without a `;` is yielded too, so its error is named."""
    start: int | None = None
    start_line = line = 1
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\n":
            line += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end == -1 else end
            continue
        elif char.isspace():
            pass
        else:
            if start is None:
                start, start_line = i, line
            if char == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    line += text[i] == "\n"
                    i += 2 if text[i] == "\\" else 1
            elif char == ";":
                yield start_line, text[start : i + 1]
                start = None
        i += 1
    if start is not None:
        yield start_line, text[start:]


# ---- what the app declares, as Cedar sees it ------------------------------------------------


@dataclass(frozen=True)
class Catalog:
    """The resources policies speak of: names with their input (or draft) models."""

    workflows: Mapping[str, type[BaseModel]]
    ops: Mapping[str, tuple[type[BaseModel], str, bool]]  # input model, effect, idempotent
    approval_types: Mapping[str, type[BaseModel]]
    # remit's own ops (`wakeup.*`), whose input fields give way to the app's: a field the app
    # types otherwise is typed as the app has it, not left out of every context.
    own_ops: frozenset[str] = frozenset()
    # The people the data files declare (`resources/people.py`): principals (`user:ann`), and
    # groups with their members, the other source beside `principals.toml`.
    declared_principals: frozenset[str] = frozenset()
    declared_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def build_schema(
    catalog: Catalog,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[str]]:
    """The Cedar schema (JSON form) for the app, each action's context type, and the input
    fields left out because two declarations type them differently."""
    left_out: list[str] = []
    workflow_inputs = _union("workflow input", catalog.workflows.values(), left_out)
    op_inputs = _union(
        "op input",
        (m for op_id, (m, _, _) in catalog.ops.items() if op_id not in catalog.own_ops),
        left_out,
        yielding=[m for op_id, (m, _, _) in catalog.ops.items() if op_id in catalog.own_ops],
    )
    drafts = _union("approval draft", catalog.approval_types.values(), left_out)
    string = {"type": "String"}
    contexts: dict[str, dict[str, Any]] = {
        "start": _record({"input": workflow_inputs}),
        "call": _record({"input": op_inputs}),
        "retry": _record({"input": workflow_inputs, "status": string}),
        "cancel": _record({"input": workflow_inputs, "status": string}),
        "pause": _record({}),
        "resume": _record({}),
        "reconcile": _record({}),
        "manage_tokens": _record({"verb": string, "subject": string}),
        "manage_schedules": _record({"verb": string}),
        "send": _record({"topic": string}),
        "set_secret": _record({}),
        "delete_secret": _record({}),
        "read_runs": _record({}),
        "read_approvals": _record({}),
        "read_operations": _record({}),
        "read_chats": _record({"owner": string}),
        "set_budget": _record(
            {"period": string, "limit": {"type": "Extension", "name": "decimal"}}
        ),
        "resolve": _record(
            {"done": {"type": "Boolean"}, "workflow": string, "input": workflow_inputs}
        ),
        "decide": _record(
            {
                "decision": string,
                "workflow": string,
                "input": workflow_inputs,
                "draft": drafts,
                "op": string,
                "call": op_inputs,
            }
        ),
        # `requester` started the run (`user:ann`); `is_requester`: the principal asking is
        # they, which a policy cannot compare on its own (a principal is no string).
        "withdraw": _record(
            {
                "requester": string,
                "is_requester": {"type": "Boolean"},
                "workflow": string,
                "input": workflow_inputs,
                "draft": drafts,
            }
        ),
    }
    people = ["User", "Agent"]
    schema = {
        "": {
            "entityTypes": {
                "User": {"memberOfTypes": ["Group"]},
                "Agent": {"memberOfTypes": ["Group"]},
                "Group": {"memberOfTypes": ["Group"]},
                # `app`: the app whose folder declares it (`apps/<app>/`), "" at the root.
                "Workflow": {"shape": _record({"app": {"type": "String"}})},
                "Op": {
                    "shape": _record(
                        {
                            "vendor": {"type": "String"},
                            "effect": {"type": "String"},
                            "idempotent": {"type": "Boolean"},
                        }
                    )
                },
                "ApprovalType": {},
                "App": {},
                "Secret": {},
                "Budget": {},
            },
            "actions": {
                action: {
                    "appliesTo": {
                        "principalTypes": people,
                        "resourceTypes": [RESOURCE_TYPES[action]],
                        "context": contexts[action],
                    }
                }
                for action in ACTIONS
            },
        }
    }
    return schema, contexts, sorted(set(left_out))


def _record(attributes: dict[str, Any]) -> dict[str, Any]:
    return {"type": "Record", "attributes": attributes}


def _union(
    what: str,
    models: Iterable[type[BaseModel]],
    left_out: list[str],
    *,
    yielding: Iterable[type[BaseModel]] = (),
) -> dict[str, Any]:
    """One optional attribute per field any of `models` has, typed as all of them agree; and
    each field of the `yielding` models none of `models` has."""
    seen: dict[str, dict[str, Any] | None] = {}
    for model in models:
        for name, info in model.model_fields.items():
            typed = cedar_type(info.annotation)
            if typed is None:
                continue
            if name in seen and seen[name] != typed:
                seen[name] = None
                left_out.append(f"{what} `{name}`")
                continue
            seen.setdefault(name, typed)
    for model in yielding:
        for name, info in model.model_fields.items():
            typed = cedar_type(info.annotation)
            if typed is not None:
                seen.setdefault(name, typed)
    attributes = {
        name: {**typed, "required": False} for name, typed in seen.items() if typed is not None
    }
    return _record(attributes)


def cedar_type(annotation: Any) -> dict[str, Any] | None:
    """The Cedar type of a field's annotation, or None when Cedar has no fitting one."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return cedar_type(options[0]) if len(options) == 1 else None
    if origin is Literal:
        values = typing.get_args(annotation)
        kinds = {type(v) for v in values}
        return cedar_type(kinds.pop()) if len(kinds) == 1 else None
    if origin in (list, set, frozenset, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        element = cedar_type(args[0]) if len(set(args)) == 1 else None
        return None if element is None else {"type": "Set", "element": element}
    if origin is typing.Annotated:
        return cedar_type(typing.get_args(annotation)[0])
    if not isinstance(annotation, type):
        return None
    if issubclass(annotation, bool):
        return {"type": "Boolean"}
    if issubclass(annotation, enum.Enum):
        member_types = {type(member.value) for member in annotation}
        return cedar_type(member_types.pop()) if len(member_types) == 1 else None
    if issubclass(annotation, int):
        return {"type": "Long"}
    if issubclass(annotation, float | Decimal):
        return {"type": "Extension", "name": "decimal"}
    if issubclass(annotation, str | datetime | date):
        return {"type": "String"}
    return None


_LONG = 2**63
_DECIMAL_PLACES = Decimal("0.0001")
_DECIMAL_MAX = Decimal("922337203685477.5807")


class _Unfit(Exception):
    """A value the context's schema types, which Cedar cannot hold as it is: `why`, at `path`
    (the attribute names down to it)."""

    def __init__(self, why: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(why)
        self.why = why
        self.path = path


def _convert(typed: Mapping[str, Any], value: Any) -> Any:
    """`value` (JSON-mode) as Cedar JSON of type `typed`. Raises `_Unfit` when it cannot be
    given exactly: dropping it would let a `forbid` that reads it pass."""
    kind = typed["type"]
    if kind == "Boolean" and isinstance(value, bool):
        return value
    if kind == "Long" and isinstance(value, int) and not isinstance(value, bool):
        if not -_LONG <= value < _LONG:
            raise _Unfit("it is beyond Cedar's 64-bit whole numbers")
        return value
    if kind == "String" and isinstance(value, str):
        return value
    if kind == "Extension" and isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = Decimal(str(value))
            exact = number.quantize(_DECIMAL_PLACES)
        except ArithmeticError:
            raise _Unfit("it is not a finite number") from None
        if not number.is_finite() or abs(number) > _DECIMAL_MAX:
            raise _Unfit("it is beyond Cedar's decimal range")
        if exact != number:
            raise _Unfit("it has more than the 4 decimal places Cedar's decimal holds")
        return {"__extn": {"fn": "decimal", "arg": f"{exact:.4f}"}}
    if kind == "Set" and isinstance(value, list):
        return [_convert(typed["element"], item) for item in value]
    if kind == "Record" and isinstance(value, Mapping):
        return _convert_record(typed, value)
    raise _Unfit(f"it is not a {kind}")


def _convert_record(typed: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for name, attribute in typed["attributes"].items():
        if values.get(name) is None:
            if attribute.get("required", True):
                # Always there, so a policy reads it without a `has` test first.
                record[name] = _convert(attribute, {}) if attribute["type"] == "Record" else ""
            continue
        try:
            record[name] = _convert(attribute, values[name])
        except _Unfit as unfit:
            raise _Unfit(unfit.why, (name, *unfit.path)) from None
    return record


def _members(entities: Iterable[Mapping[str, Any]]) -> list[str]:
    """The people and agents of the entity graph (`user:ann`, `agent:ar-bot`), sorted."""
    return sorted(
        f"{e['uid']['type'].lower()}:{e['uid']['id']}"
        for e in entities
        if e["uid"]["type"] in PRINCIPAL_TYPES.values()
    )


def _groups(entities: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Each group of the entity graph with the people and agents in it, directly or through
    the groups it holds (`user:ann`, `agent:ar-bot`)."""
    parents = {
        (e["uid"]["type"], e["uid"]["id"]): [(p["type"], p["id"]) for p in e["parents"]]
        for e in entities
    }
    found: dict[str, set[str]] = {ident: set() for kind, ident in parents if kind == "Group"}
    for (kind, ident), direct in parents.items():
        if kind not in PRINCIPAL_TYPES.values():
            continue
        seen: set[tuple[str, str]] = set()
        todo = list(direct)
        while todo:
            group = todo.pop()
            if group in seen:
                continue
            seen.add(group)
            found.setdefault(group[1], set()).add(f"{kind.lower()}:{ident}")
            todo += parents.get(group, [])
    return {group: frozenset(members) for group, members in found.items()}


def _entities(principals_file: Path, catalog: Catalog) -> list[dict[str, Any]]:
    """The entity graph: groups and their members from `principals.toml` and from the data
    files' declared people (each principal and group from one of the two), and the app's ops
    (with their vendor, effect and idempotence), workflows and approval types."""
    found: dict[tuple[str, str], set[tuple[str, str]]] = {}
    defined = _principals_toml(principals_file, found)
    _declared_people(
        catalog, found, defined, f"{principals_file.parent.name}/{principals_file.name}"
    )
    entities = _people_entities(found)
    for op_id, (_, effect, idempotent) in sorted(catalog.ops.items()):
        vendor = op_id.split(".", 1)[0]
        attrs = {"vendor": vendor, "effect": effect, "idempotent": idempotent}
        entities.append({"uid": {"type": "Op", "id": op_id}, "attrs": attrs, "parents": []})
    for ident in sorted(catalog.workflows):
        attrs = {"app": ident.split(".", 1)[0] if "." in ident else ""}
        entities.append({"uid": {"type": "Workflow", "id": ident}, "attrs": attrs, "parents": []})
    for ident in sorted(catalog.approval_types):
        entities.append({"uid": {"type": "ApprovalType", "id": ident}, "attrs": {}, "parents": []})
    return entities


def _people_entities(found: Mapping[tuple[str, str], set[tuple[str, str]]]) -> list[dict[str, Any]]:
    """The entities of the people, agents and groups in `found`, each with its groups."""
    return [
        {
            "uid": {"type": kind, "id": ident},
            "attrs": {},
            "parents": [{"type": t, "id": i} for t, i in sorted(parents)],
        }
        for (kind, ident), parents in sorted(found.items())
    ]


def _principals_toml(
    principals_file: Path, found: dict[tuple[str, str], set[tuple[str, str]]]
) -> set[str]:
    """Add the groups and members of `principals.toml`, when the app has one, to `found`;
    return the groups it defines (its `[groups]` keys, not those only listed as members)."""
    if not principals_file.exists():
        return set()
    name = f"{principals_file.parent.name}/{principals_file.name}"
    try:
        declared = tomllib.loads(principals_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise _Broken(f"{name}: {_one_line(error)}") from None
    groups = declared.get("groups", {})
    unknown = sorted(set(declared) - {"groups", "telegram"})
    if unknown or not isinstance(groups, dict):
        raise _Broken(
            f"{name}: holds a [groups] table, each group a list of members "
            f'(e.g. clerks = ["user:ann", "agent:ops-bot", "group:controllers"]), and '
            f"optionally a [telegram] table of principals' Telegram user ids; not "
            f"{', '.join(f'[{table}]' for table in unknown) or 'that [groups]'}"
        )
    for group, members in groups.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise _Broken(f"{name}: group `{group}` must be a list of member names")
        found.setdefault(("Group", group), set())
        for member in members:
            if member.startswith("group:"):
                uid = ("Group", member.removeprefix("group:"))
            else:
                try:
                    who = Principal.parse(member)
                except RemitError as error:
                    raise _Broken(f"{name}: group `{group}`: {error}") from None
                uid = (who.kind, who.name)
            found.setdefault(uid, set()).add(("Group", group))
    return set(groups)


def _declared_people(
    catalog: Catalog,
    found: dict[tuple[str, str], set[tuple[str, str]]],
    defined: set[str],
    toml: str,
) -> None:
    """Add the groups the data files declare to `found` (the graph `principals.toml` made,
    which defines the groups `defined`), refusing a group both define or a principal both
    list: each has one source. A `principals.toml` group may hold a declared group."""
    for principal in sorted(catalog.declared_principals):
        who = Principal.parse(principal)
        if (who.kind, who.name) in found:
            raise _Broken(
                f"{principal} is declared in the data files (a remit.person) and listed in "
                f"{toml}: each principal has one source; remove them from {toml} and list "
                "them in declared groups, or remove the declaration"
            )
    for group, members in sorted(catalog.declared_groups.items()):
        if group in defined:
            raise _Broken(
                f"the group `{group}` is declared in the data files (a remit.group) and "
                f"defined in {toml}'s [groups]: each group has one source; remove it from "
                f"one of them (a group there may still list group:{group} among its members)"
            )
        found.setdefault(("Group", group), set())
        for member in members:
            if member.startswith("group:"):
                uid = ("Group", member.removeprefix("group:"))
            else:
                who = Principal.parse(member)
                uid = (who.kind, who.name)
            found.setdefault(uid, set()).add(("Group", group))
