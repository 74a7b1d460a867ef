"""What `remit init NAME` makes, and making it.

The rule: in a folder that is already a repo (it holds `apps/`, `workflows/`, `connectors/` or
`app.py`), `remit init NAME` adds the app `apps/NAME/`; anywhere else it makes the repo
`NAME/` in that folder, with one app, also named NAME. Either way nothing is overwritten: a
target that exists (a repo folder that is not empty, any file the plan would write) is refused
before a file is written, and so is a name remit could not load.

A new repo holds a shop connector (`connectors/shop.py`: ops, an httpx driver, a fake and
scenario steps), the app's `refund` workflow behind an approval gate, its scenarios, policies,
pytest tests (of the workflow, and of the driver against the API's shape), a demo session
(`demo/session.txt`), a README, `.gitignore` and `pyproject.toml`. A new app brings its own
copy of the connector (`connectors/<app>_shop.py`, vendor `<app>_shop`, its sentences saying
"the <app> shop"), so it passes `remit test` whatever else the repo holds; its policies name
people rather than groups, since the repo's `principals.toml` is not rewritten.

The templates are files in `templates/` with `{{token}}` placeholders, filled in by `plan`.
"""

from __future__ import annotations

import importlib.machinery
import keyword
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from remit.core.errors import InitRefused
from remit.declare.apps import APPS_FOLDER, is_app_name, suggested

# What makes a folder a repo (see `load_app`): any one of these.
REPO_MARKERS = (APPS_FOLDER, "workflows", "connectors", "app.py")
POLICIES = "policies"
_TOKEN = re.compile(r"\{\{(\w+)\}\}")
# Folders by name, each holding its files and folders (a file holds nothing).
_Tree = dict[str, "_Tree"]

# Each template and where its text goes, under the repo's root.
_APP_FILES = {
    "app/workflow.py.tmpl": f"{APPS_FOLDER}/{{app}}/workflows/refund.py",
    "app/refund.feature.tmpl": f"{APPS_FOLDER}/{{app}}/scenarios/refund.feature",
    "app/connector.py.tmpl": "connectors/{vendor}.py",
    "app/test_app.py.tmpl": "tests/test_{app}.py",
}
_REPO_FILES = {
    "repo/init.py.tmpl": "__init__.py",
    "repo/README.md.tmpl": "README.md",
    "repo/gitignore.tmpl": ".gitignore",
    "repo/pyproject.toml.tmpl": "pyproject.toml",
    "repo/session.txt.tmpl": "demo/session.txt",
    "repo/tests_init.py.tmpl": "tests/__init__.py",
    "repo/test_driver.py.tmpl": "tests/test_{vendor}_driver.py",
    "repo/principals.toml.tmpl": f"{POLICIES}/principals.toml",
    "repo/policy.cedar.tmpl": f"{POLICIES}/{{app}}.cedar",
}
# Under policies, who may do what, and the scenarios that say so.
_POLICY_SCENARIOS = {
    "app/policies.feature.tmpl": f"{APPS_FOLDER}/{{app}}/scenarios/policies.feature",
}
# An app added to a repo with policies governs itself in a file of its own.
_APP_POLICY = {"app/policy.cedar.tmpl": f"{POLICIES}/{{app}}.cedar", **_POLICY_SCENARIOS}


@dataclass(frozen=True)
class Plan:
    """What `remit init` is to make: a new `repo` or an `app` in one, the repo's root folder,
    and each file's text by its path under the root."""

    kind: Literal["repo", "app"]
    name: str
    root: Path
    files: Mapping[str, str]

    def write(self) -> list[Path]:
        """Write every file, none over one that exists, and return their paths."""
        written = []
        for relative, text in self.files.items():
            path = self.root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8") as file:  # "x": never over a file
                file.write(text)
            written.append(path)
        return written

    def tree(self) -> str:
        """The files as a tree, under the repo's folder name."""
        nested: _Tree = {}
        for relative in self.files:
            level = nested
            for part in relative.split("/"):
                level = level.setdefault(part, {})
        lines = [f"{self.root.name}/"]

        def draw(level: _Tree, indent: str) -> None:
            names = sorted(level, key=lambda n: (not level[n], n))  # folders first
            for index, name in enumerate(names):
                last = index == len(names) - 1
                branch, folder = "└── " if last else "├── ", "/" if level[name] else ""
                lines.append(f"{indent}{branch}{name}{folder}")
                draw(level[name], indent + ("    " if last else "│   "))

        draw(nested, "")
        return "\n".join(lines)


def plan(name: str, where: Path) -> Plan:
    """What `remit init NAME` in folder `where` makes: the app `apps/NAME/` when `where` is a
    repo, else the repo `where/NAME/`. Refused (`InitRefused`), with nothing written, when the
    name cannot be loaded or a target exists."""
    where = where.resolve()  # refusals name whole paths
    for folder in (where, *where.parents):
        if folder.name == APPS_FOLDER and is_repo(folder.parent):
            raise InitRefused(
                f"{where} is inside {folder}, the apps of the repo {folder.parent}: run "
                f"`remit init {name}` in {folder.parent} to add the app {folder / name}"
            )
    if is_repo(where):
        return _app_plan(name, where)
    return _repo_plan(name, where)


def is_repo(folder: Path) -> bool:
    """Whether `folder` is a repo `load_app` loads: it holds one of `REPO_MARKERS`."""
    return any((folder / marker).exists() for marker in REPO_MARKERS)


def _repo_plan(name: str, where: Path) -> Plan:
    _check_repo_name(name)
    root = where / name
    if root.exists() and not root.is_dir():
        raise InitRefused(f"{root} is a file: give another name, or remove it")
    if root.is_dir() and any(root.iterdir()):
        raise InitRefused(
            f"{root} exists and is not empty: give another name, remove the folder, or run "
            f"`remit init` in a repo to add an app to it"
        )
    values = _values(name, repo=name, vendor="shop", shop="the shop")
    templates = {**_REPO_FILES, **_APP_FILES, **_POLICY_SCENARIOS}
    return Plan("repo", name, root, _filled(templates, values))


def _app_plan(name: str, root: Path) -> Plan:
    if not is_app_name(name):
        raise InitRefused(
            f"`{name}` cannot name the app `{APPS_FOLDER}/{name}`: an app's name is 1 to 40 "
            "lowercase letters, digits and underscores, starting with a letter, e.g. "
            f"`{suggested(name, joiner='_', fallback='app', prefix='a_')[:40]}`"
        )
    if (root / "app.py").exists():
        raise InitRefused(
            f"{root / 'app.py'} declares the repo's App and lists its connectors, so the "
            f"connector a new app brings would not be loaded: add `{APPS_FOLDER}/{name}/` by "
            "hand, or move the App's connectors to connectors/*.py and remove app.py"
        )
    folder = root / APPS_FOLDER / name
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InitRefused(
            f"the app {folder} exists already: give another name, or remove the folder"
        )
    values = _values(
        name,
        repo=root.name,
        vendor=f"{name}_shop",
        shop=f"the {name.replace('_', ' ')} shop",
    )
    templates = dict(_APP_FILES)
    if (root / POLICIES).is_dir():  # without policies, everything is allowed: leave it so
        templates.update(_APP_POLICY)
    files = _filled(templates, values)
    taken = [relative for relative in files if (root / relative).exists()]
    if taken:
        raise InitRefused(
            f"adding the app `{name}` would overwrite {', '.join(taken)} in {root}: give "
            "another name, or move those files"
        )
    return Plan("app", name, root, files)


def _check_repo_name(name: str) -> None:
    """Refuse a repo name `load_app` cannot import the folder as, or that names its app badly."""
    if not is_app_name(name) or keyword.iskeyword(name):
        raise InitRefused(
            f"`{name}` cannot name a repo: the folder is imported as a Python package, and its "
            "first app is named after it, so use 1 to 40 lowercase letters, digits and "
            "underscores, starting with a letter and not a Python keyword, e.g. "
            f"`{suggested(name, joiner='_', fallback='ops', prefix='a_')[:40]}`"
        )
    if _importable(name):
        raise InitRefused(
            f"`{name}` is already the name of a Python module here (`import {name}` finds "
            f"it), which the repo's package would clash with: give another name, e.g. "
            f"`{name}_ops`"
        )


def _importable(name: str) -> bool:
    """Whether `import name` finds a module other than a folder in the current one."""
    if name in sys.builtin_module_names or name in sys.stdlib_module_names:
        return True
    here = {"", ".", os.getcwd()}
    elsewhere = [entry for entry in sys.path if entry not in here]
    return importlib.machinery.PathFinder.find_spec(name, elsewhere) is not None


def _values(app: str, *, repo: str, vendor: str, shop: str) -> dict[str, str]:
    """Every placeholder's value."""
    camel = "".join(part.capitalize() for part in vendor.split("_"))
    return {
        "app": app,
        "repo": repo,
        "vendor": vendor,
        "Vendor": camel,
        "VENDOR": vendor.upper(),
        "shop": shop,
        "approval": f"{app.replace('_', '-')}-refund",
        "base_url": f"https://api.{vendor.replace('_', '-')}.example/v1",
    }


def _filled(templates: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """Each template's text with its placeholders filled, by the path it goes to."""
    folder = resources.files("remit.init") / "templates"
    return {
        target.format(**values): _TOKEN.sub(
            lambda found: values[found.group(1)],
            folder.joinpath(template).read_text(encoding="utf-8"),
        )
        for template, target in templates.items()
    }
