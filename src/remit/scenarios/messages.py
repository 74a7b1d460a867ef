"""What a scenario knows of a message before it sends it: who sends it, and the model the
waiting run parses it as, so the step's table is read as that model's fields say.

A run's wait names its model in code (`ctx.wait_for("paid", model=Paid)`), not in anything
the app declares, so the model is read from the workflow function's own source: a call of
`wait_for` whose topic is the text `"paid"` (or a name bound to it) and whose `model=` names a
pydantic model the function's module can see. A wait in a helper the workflow calls, a topic
computed at run time or two waits on one topic with different models leave the model unknown,
and the table's cells are read as any record's are.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import re
import textwrap
from typing import Any

from pydantic import BaseModel

from remit.declare.workflows import Workflow

# The words before `sends` that are one name: a person's short name or a principal.
_ONE_NAME = re.compile(r"[\w.@:-]+")


def sender(words: str) -> str:
    """The principal a step's sender words name: a person's short name (`ann` is `user:ann`)
    or a principal as it is (`agent:billing`); other words name an agent, lowercase, joined by
    dashes, a leading `the` left out (`the payments feed` is `agent:payments-feed`)."""
    said = words.strip()
    if _ONE_NAME.fullmatch(said):
        return said if ":" in said else f"user:{said}"
    name = re.sub(r"^the\s+", "", said.lower())
    return "agent:" + re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def message_model(workflow: Workflow, topic: str) -> type[BaseModel] | None:
    """The pydantic model `workflow`'s own function parses messages on `topic` as, when its
    code names exactly one; None otherwise."""
    return _models(workflow.fn).get(topic)


@functools.cache
def _models(fn: Any) -> dict[str, type[BaseModel] | None]:
    """Each topic the function waits on by its written name, and the one model it names for it
    (None where it names none, or several)."""
    fn = inspect.unwrap(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return {}
    scope = {**vars(builtins), **getattr(fn, "__globals__", {})}
    found: dict[str, set[Any]] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "wait_for"
            and node.args
        ):
            continue
        topic = _value(node.args[0], scope)
        if not isinstance(topic, str):
            continue
        named = next((k.value for k in node.keywords if k.arg == "model"), None)
        found.setdefault(topic, set()).add(None if named is None else _value(named, scope))
    return {
        topic: next(iter(models)) if len(models) == 1 and _is_model(next(iter(models))) else None
        for topic, models in found.items()
    }


def _value(node: ast.expr, scope: dict[str, Any]) -> Any:
    """What a constant, a name or a dotted name in the function's code stands for, from its
    module's names; None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _value(node.value, scope)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)
