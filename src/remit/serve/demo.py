"""`remit demo`: a whole instance of an app in one process, on fakes, on a throwaway database.

A `Demo` runs a worker and the HTTP API's client on one SQLite file under the app's
`.remit/demo/` folder, wiped when the demo starts. Every connector runs on its fake, and there
is one fake per vendor: the worker's runs and the API's direct calls (`remit call`) reach the
same objects, so what a run wrote is what a later call reads, and `GET /fakes/{vendor}` shows
it. A connector with no fake is refused, naming it.

Before the instance answers anyone it is seeded (`Seed`: direct calls on the shared fakes) and
mints an API token for each principal the app's policies name, and for the default actor. The
URL and the tokens are written to `.remit/demo/instance.json` (readable by its owner only), where
`remit fakes show` and a script played by `remit demo --script` find them, and removed when the
demo closes.

The fakes keep their state in `.remit/demo/fakes/` (`REMIT_FAKES_DIR`, set while the demo runs),
so the processes a change's checks start see the demo's vendors. An app with a forge has its
repo there too (`fake_repo.py`): `main` holds the app folder's files, and each folder under
`demo/branches/` is a branch, its files laid over `main`, ready for `remit change open BRANCH`.
A secret the data files declare (`secret("NAME")`) that is not set is stored with a made-up
value, so a change's deploy can apply them: it reaches fake vendors only. What the demo binds
goes to its own lockfile, `.remit/demo/remit.lock`, never the app folder's.

One demo of an app runs at a time: it holds a lock on `.remit/demo.lock` (beside the folder it
wipes) from `start` to `close`, and a second is refused, naming the first's pid and URL.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from remit.app import App
from remit.changes.checks import CHANGES_DIR
from remit.client import Client
from remit.connectors.base import Fake
from remit.connectors.resources import FAKES_DIR
from remit.core.errors import RemitError
from remit.core.settings import DATA_DIR, Settings
from remit.core.sqlite_file import FOLDER_MODE, private_file
from remit.declare.resources import secret_names
from remit.execution.direct import CallResult
from remit.resources.lockfile import FILE as LOCKFILE
from remit.serve.api import LOCAL_NAMES, create_api
from remit.serve.fake_repo import fake_repo
from remit.serve.worker import Worker

# Where a demo keeps its database, its secret key and `instance.json`, under the app's folder.
DEMO_FOLDER = Path(DATA_DIR, "demo")
INSTANCE_FILE = "instance.json"
# Held by the running demo, beside its folder: it holds the demo's pid.
LOCK_FILE = "demo.lock"
# A demo answers on this machine only: its tokens are written to a file in plain text.
DEMO_HOST = "127.0.0.1"
# How long the console's sign-in links a demo prints stay good (each works once).
DEMO_LINK_LIFE = timedelta(hours=8)
# The branches of the app's repo a demo's fake forge holds, one folder each, under the app's
# folder: each folder's files laid over `main`.
BRANCHES = Path("demo", "branches")

# `call(op_id, input, by)`: a direct call on the demo's fakes, as `by` (None: the default actor).
Call = Callable[[str, Mapping[str, Any], str | None], CallResult]
# What seeds a demo before it answers anyone: it makes its calls through the `Call` it is given.
Seed = Callable[[Call], None]


def demo_folder(app_folder: Path) -> Path:
    """Where the demo of the app in `app_folder` keeps what it writes."""
    return app_folder / DEMO_FOLDER


def demo_settings(app_folder: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """The environment's settings for the app, made a demo's: its SQLite file under
    `.remit/demo/`, every connector on its fake, on loopback, with nothing sent out of the
    process (no wakeup service, webhook or Telegram)."""
    folder = demo_folder(app_folder).resolve()
    settings = Settings.from_env(app_folder, environ=environ)
    return replace(
        settings,
        database_url=f"sqlite:///{folder / 'remit.sqlite'}",
        fakes=True,
        http_host=DEMO_HOST,
        secret_key=None,
        secret_key_file=folder / "secret.key",
        wakeup_url=None,
        wakeup_account_token=None,
        webhook_url=None,
        webhook_secret=None,
        telegram_api=None,
    )


def demo_principals(app: App, actor: str) -> list[str]:
    """Who the demo mints a token for: each person and agent the app's policies name
    (`policies/principals.toml`), then the default actor."""
    return list(dict.fromkeys([*app.policy.members, actor]))


class Demo:
    """A demo instance of `app` (see the module's docstring): `start` it, serve `api()`, then
    `close` it. `folder` is wiped by `start`."""

    def __init__(self, app: App, settings: Settings, folder: Path) -> None:
        self.app = app
        self.settings = settings
        self.folder = folder
        self.tokens: dict[str, str] = {}
        # The branches the demo's fake forge holds, by name: each one's head commit.
        self.branches: dict[str, str] = {}
        self._worker: Worker | None = None
        self._client: Client | None = None
        self._lock: int | None = None  # the descriptor of the held lock file
        self._environ: dict[str, str | None] = {}  # what the demo's variables replaced
        self._own: contextlib.ExitStack = contextlib.ExitStack()  # the demo's own lockfile

    @classmethod
    def of(cls, app: App, app_folder: Path, environ: Mapping[str, str] | None = None) -> Demo:
        """The demo of `app`, loaded from `app_folder`, with the environment's settings."""
        return cls(app, demo_settings(app_folder, environ), demo_folder(app_folder).resolve())

    @property
    def worker(self) -> Worker:
        """The demo's worker, serving the app's queues on the shared fakes."""
        if self._worker is None:
            raise RemitError("the demo has not started: call Demo.start() first")
        return self._worker

    @property
    def client(self) -> Client:
        """The API's client, whose direct calls reach the worker's fakes."""
        if self._client is None:
            raise RemitError("the demo has not started: call Demo.start() first")
        return self._client

    @property
    def fakes(self) -> dict[str, Fake]:
        """The one fake of each vendor, by vendor: every run and every direct call uses it."""
        return {
            vendor: implementation
            for vendor, implementation in self.worker.implementations.items()
            if isinstance(implementation, Fake)
        }

    def start(self, seed: Seed | None = None) -> None:
        """Take the app's demo lock, wipe the demo's folder, start its worker on a fresh
        database, seed it with `seed`, and mint its tokens. Refuses a second demo of the app,
        and an app with a connector that has no fake, naming it."""
        self._lock = _take_lock(self.folder)
        if self.folder.exists():
            shutil.rmtree(self.folder)
        _private_folder(self.folder)
        self._set_environ(
            {FAKES_DIR: str(self.folder / "fakes"), CHANGES_DIR: str(self.folder / "changes")}
        )
        self._own_lockfile()
        self.branches = self._hold_repo()
        worker = Worker(self.app, self.settings)  # makes each fake, or refuses a connector
        worker.start()
        self._worker = worker
        client = Client(self.app, self.settings, pool_size=16, prepare=False)
        client.use_implementations(worker.implementations)
        self._client = client
        self._fill_secrets()
        if seed is not None:
            seed(self.call)
        self.tokens = {
            principal: client.services.tokens.create(
                principal, by=self.settings.actor, name="demo"
            )[1]
            for principal in demo_principals(self.app, self.settings.actor)
        }

    def _set_environ(self, values: Mapping[str, str]) -> None:
        """Set the demo's environment variables in this process (the worker's fakes and the
        processes it starts read them) until `close` puts back what they replaced."""
        for name, value in values.items():
            self._environ.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def _own_lockfile(self) -> None:
        """Bind the demo's resources in its own lockfile until `close`: its vendors are fakes
        wiped with it, and the app folder's `remit.lock` binds the real ones."""
        if self.app.resources is not None:
            self._own.enter_context(self.app.resources.lockfile.kept_at(self.folder / LOCKFILE))

    def _hold_repo(self) -> dict[str, str]:
        """Put the app's repo on its fake forge, with a branch for each folder under
        `demo/branches/`: each branch's head, by name (none for an app with no forge)."""
        repo = fake_repo(self.app)
        folder = self.app.folder
        if repo is None or folder is None:
            return {}
        repo.hold(folder, message=f"{self.app.name} as the demo found it")
        found = sorted(path for path in (folder / BRANCHES).glob("*") if path.is_dir())
        return {
            branch.name: repo.lay_over(
                branch.name,
                branch,
                message=f"{branch.name}: the demo's branch ({(BRANCHES / branch.name).as_posix()}/)",
                author="demo",
            )
            for branch in found
        }

    def _fill_secrets(self) -> list[str]:
        """Store a made-up value for each secret the data files declare and no one has set
        (stored, or in the environment), so that an apply can send it: to a fake vendor, as
        everything in a demo. The names stored."""
        if self.app.resources is None:
            return []
        declared = self.app.resources.declared.by_name.values()
        names = sorted({name for d in declared for name in secret_names(dict(d.fields))})
        store = self.client.services.secrets
        made = [name for name in names if not os.environ.get(name) and store.get(name) is None]
        for name in made:
            store.set(name, f"demo-{secrets.token_urlsafe(12)}", by=self.settings.actor)
        return made

    def call(self, op_id: str, input: Mapping[str, Any], by: str | None = None) -> CallResult:
        """A direct call on the demo's fakes, under the policies, as `by` (default: the default
        actor). One that does not come to `ok` is raised, naming the op: a seed that fails
        would leave the demo showing something other than it promises."""
        who = by or self.settings.actor
        try:
            result = self.client.calls.call(op_id, input, by=who)
        except RemitError as refused:
            raise RemitError(
                f"seeding the demo: `{op_id}` as {who} was refused: {refused}"
            ) from None
        if result.status != "ok":
            why = result.error or f"it is {result.status} ({result.note or 'a run waits'})"
            raise RemitError(f"seeding the demo: `{op_id}` as {who} did not succeed: {why}")
        return result

    def sign_in_links(self, url: str) -> dict[str, str]:
        """A one-time link to the web console for each principal with a token, good for the
        demo's day (`DEMO_LINK_LIFE`): opening one signs its person in."""
        return {
            principal: f"{url}/console/sign-in?code="
            + self.client.services.signins.link(
                principal, by=self.settings.actor, expires_in=DEMO_LINK_LIFE
            )[1]
            for principal in self.tokens
        }

    def api(self) -> FastAPI:
        """The HTTP API on the demo's client, answering `GET /fakes/{vendor}` too."""
        return create_api(self.client, allowed_hosts=LOCAL_NAMES, fakes=self.fakes)

    def publish(self, url: str) -> Path:
        """Write `instance.json` (the URL and the tokens, by principal) for its owner alone to
        read, and return its path."""
        path = self.folder / INSTANCE_FILE
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump({"url": url, "actor": self.settings.actor, "tokens": self.tokens}, file)
        return path

    def close(self) -> None:
        """Stop the worker (running attempts get no drain: the database is thrown away), put
        back the environment the demo changed, remove `instance.json` and let go of the
        lock."""
        if self._worker is not None:
            self._worker.stop(timeout=0)
            self._worker = None
        if self._client is not None:
            self._client.close()
            self._client = None
        for name, value in self._environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._environ = {}
        self._own.close()
        if self._lock is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / INSTANCE_FILE).unlink()
            os.close(self._lock)
            self._lock = None


def _take_lock(folder: Path) -> int:
    """The descriptor of the demo lock beside `folder`, held, with this process's pid in it;
    a `RemitError` naming the demo that holds it already."""
    _private_folder(folder.parent)
    descriptor = private_file(folder.parent / LOCK_FILE)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(descriptor, 64).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        try:
            url = json.loads((folder / INSTANCE_FILE).read_text())["url"]
        except (OSError, ValueError, KeyError, TypeError):
            url = "not answering yet"
        raise RemitError(
            f"a demo of this app is already running (pid {holder}, URL {url}): use it, or stop "
            "it (Ctrl-C where it runs) before starting another"
        ) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, str(os.getpid()).encode(), 0)
    return descriptor


def _private_folder(folder: Path) -> None:
    """Make `folder` for its owner alone (0700, whatever the umask) unless it exists."""
    try:
        folder.mkdir(mode=FOLDER_MODE)
    except FileExistsError:
        return
    os.chmod(folder, FOLDER_MODE)


def read_instance(app_folder: Path) -> dict[str, Any]:
    """The running demo's `instance.json` in `app_folder`, or a `RemitError` saying to start
    one (also when the file is left by a demo that did not close: no one holds its lock)."""
    folder = demo_folder(app_folder)
    path = folder / INSTANCE_FILE
    try:
        if not _held(folder.parent / LOCK_FILE):
            raise FileNotFoundError(path)
        found: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise RemitError(
            f"no demo is running for the app in {app_folder}: start one with `remit demo`, or "
            "set REMIT_URL and REMIT_TOKEN to the instance to ask"
        ) from None
    except (OSError, ValueError) as error:
        raise RemitError(f"{path} cannot be read: {error}") from None
    return found


def _held(lock: Path) -> bool:
    """Whether a demo holds the lock file `lock` (FileNotFoundError when there is none)."""
    descriptor = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False
