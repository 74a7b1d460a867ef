"""`import remit` is cheap: each public name is imported from its module on first use, and
every name in `__all__` still imports, lists in `dir(remit)`, and is the object its module
defines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import remit

HEAVY = ("dbos", "fastapi", "opentelemetry", "sqlalchemy", "pydantic")


def fresh(code: str) -> object:
    """What `code` prints, as JSON, run in a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_import_remit_loads_no_heavy_package() -> None:
    loaded = fresh(
        "import json, sys, remit; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    assert loaded == []


def test_the_version_needs_no_other_import() -> None:
    assert fresh("import json, remit; print(json.dumps(remit.__version__))") == remit.__version__


def test_a_star_import_gives_every_public_name() -> None:
    names = fresh(
        "import json; from remit import *; "
        "import remit; print(json.dumps(sorted(n for n in remit.__all__ if n in globals())))"
    )
    assert names == sorted(remit.__all__)


def test_every_public_name_is_listed_and_resolves() -> None:
    assert set(remit.__all__) <= set(dir(remit))
    for name in remit.__all__:
        value = getattr(remit, name)
        assert value is getattr(remit, name), name  # kept once imported


def test_names_are_the_objects_their_modules_define() -> None:
    from remit.app import App
    from remit.client import Client
    from remit.connectors import op
    from remit.core.errors import RemitError
    from remit.people.approvals import Approvals

    assert (remit.App, remit.Client, remit.op, remit.RemitError, remit.Approvals) == (
        App,
        Client,
        op,
        RemitError,
        Approvals,
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'remit' has no attribute 'Wrokflow'"):
        _ = remit.Wrokflow  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="Wrokflow"):
        exec("from remit import Wrokflow", {})
