"""Apps in one repo: which app a declaration belongs to, and the names that follow from it.

A repo's root holds the company's connectors, policies and resources, and its own workflows in
`workflows/`. Each folder `apps/<app>/` holds one app's workflows (and the collections, queues
and approval types declared beside them). `load_app` imports the repo as a package named after
its folder, so an app's modules are `<repo>.apps.<app>.…`; once the repo is registered here,
what such a module declares belongs to `<app>`:

- a workflow `chase` is named `<app>.chase`, so two apps may each have one;
- a collection `contacts` is `<app>.contacts`, its ops `data.<app>.contacts.<op>`;
- a queue `mail` is `<app>.mail`, and the app's workflows run on `<app>.default` unless they
  name another.

What the root declares keeps its plain name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from remit.core.errors import AppError

# The folder name of an app: a Python package name, lowercase (its workflows are `<app>.<name>`).
_APP = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
APPS_FOLDER = "apps"

# The packages `load_app` imported a repo as: their `apps/<app>/` modules belong to `<app>`.
_repos: set[str] = set()


def suggested(name: object, *, joiner: str, fallback: str, prefix: str) -> str:
    """A name like `name` in lowercase letters, digits and `joiner`, starting with a letter
    (`prefix` put before one that does not): what an error refusing `name` suggests instead."""
    suggestion = re.sub(rf"[^a-z0-9{joiner}]+", joiner, str(name).lower()).strip(joiner)
    suggestion = suggestion or fallback
    return suggestion if suggestion[0].isalpha() else f"{prefix}{suggestion}"


def is_app_name(name: object) -> bool:
    """Whether `name` may name an app's folder, and so prefix its workflows' names."""
    return isinstance(name, str) and _APP.fullmatch(name) is not None


def check_app_name(name: str) -> None:
    """Refuse an app folder whose name cannot prefix its workflows' names."""
    if not is_app_name(name):
        suggestion = suggested(name, joiner="_", fallback="app", prefix="a_")
        raise AppError(
            f"app folder `apps/{name}` must be named with 1 to 40 lowercase letters, digits and "
            f"underscores, starting with a letter: rename it, for example `apps/{suggestion[:40]}`"
        )


def register_repo(package: str) -> None:
    """Say that `package` is a repo `load_app` imports: its `apps/<app>/` modules are apps'."""
    _repos.add(package)


def app_of_module(module: str | None) -> str | None:
    """The app whose folder defines `module` (`<repo>.apps.<app>.…`), None for the root's.

    The repo is one `load_app` imported, or a package that looks like one (its folder has
    `apps/<app>/` beside an `app.py`, `workflows/` or `connectors/`): a module a test imports
    before loading the repo belongs to its app all the same."""
    if not module:
        return None
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != APPS_FOLDER:
        return None
    if parts[0] in _repos or _looks_like_repo(parts[0], parts[2]):
        return parts[2]
    return None


def _looks_like_repo(package: str, app: str) -> bool:
    imported = sys.modules.get(package)
    for folder in getattr(imported, "__path__", None) or ():
        root = Path(folder)
        if (root / APPS_FOLDER / app).is_dir() and any(
            (root / marker).exists() for marker in ("app.py", "workflows", "connectors")
        ):
            return True
    return False


def caller_app(depth: int = 2) -> str | None:
    """The app of the module that called the function calling this one (`depth` frames up)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:  # a shallower stack than asked for: no module to read
        return None
    return app_of_module(frame.f_globals.get("__name__"))


def qualified(app: str | None, name: str) -> str:
    """`name` as the app `app` declares it: `<app>.<name>`, or `name` itself at the root."""
    return name if app is None else f"{app}.{name}"


def app_of_name(name: str) -> str | None:
    """The app a qualified name (`ar.chase`) belongs to, None for a root one (`chase`)."""
    return name.split(".", 1)[0] if "." in name else None
