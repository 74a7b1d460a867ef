"""load_app on app folders written under tmp_path.

Each folder is imported as a package named after it, so every test uses a unique name, and the
`app_folder` fixture puts `sys.path` and `sys.modules` back as they were afterwards.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remit import App, AppError, Connector, Workflow, load_app
from remit.connectors.apps import list_apps
from remit.connectors.wakeup import wakeup_connector

CONNECTOR = """
from pydantic import BaseModel

from remit import CallContext, Connector, Driver, Fake, implements, op


class InvoiceRef(BaseModel):
    invoice_id: str


class Invoice(BaseModel):
    invoice_id: str
    amount_cents: int


get_invoice = op("payments.invoices.get", effect="read", input=InvoiceRef, output=Invoice)


class PaymentsFake(Fake):
    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        return Invoice(invoice_id=input.invoice_id, amount_cents=1200)


class PaymentsDriver(Driver):
    credentials = ("PAYMENTS_API_KEY",)

    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        raise NotImplementedError


payments = Connector("payments", ops=[get_invoice], driver=PaymentsDriver, fake=PaymentsFake)
"""

WORKFLOW = """
from typing import Any

from pydantic import BaseModel

from remit import workflow

from ..connectors.payments import get_invoice, payments


class ChaseInput(BaseModel):
    invoice_id: str


@workflow(name="chase-invoice", input=ChaseInput, uses=[get_invoice])
def chase_invoice(ctx: Any, input: ChaseInput) -> None:
    return None
"""

APP = """
from typing import Any

from pydantic import BaseModel

from remit import App, Queue, workflow

from .connectors.payments import get_invoice, payments


class ChaseInput(BaseModel):
    invoice_id: str


@workflow(name="chase-invoice", input=ChaseInput, uses=[get_invoice], queue="slow")
def chase_invoice(ctx: Any, input: ChaseInput) -> None:
    return None


app = App(
    name="ar-desk",
    workflows=[chase_invoice],
    connectors=[payments],
    queues=[Queue("slow", concurrency=2)],
)
"""


def write(folder: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def app_folder(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Make a folder `<prefix>_<uuid hex>` under tmp_path with the given files."""
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)

    def make(files: dict[str, str], *, prefix: str = "shop") -> Path:
        folder = tmp_path / f"{prefix}_{uuid.uuid4().hex}"
        folder.mkdir()
        write(folder, files)
        return folder

    yield make
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]


def test_an_app_py_declaring_one_app(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({"app.py": APP, "connectors/payments.py": CONNECTOR})

    app = load_app(folder)

    assert isinstance(app, App)
    assert app.name == "ar-desk"
    assert list(app.workflows) == ["chase-invoice"]
    assert app.workflows["chase-invoice"].queue == "slow"
    assert list(app.connectors) == ["payments", "wakeup", "remit"]
    assert app.queues["slow"].concurrency == 2
    assert app.workflows["chase-invoice"].fn.__module__ == f"{folder.name}.app"


def test_an_app_loads_from_a_string_path_and_again(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({"app.py": APP, "connectors/payments.py": CONNECTOR})

    first = load_app(str(folder))
    second = load_app(folder)

    assert second is first


def test_without_app_py_workflows_and_connectors_are_discovered(
    app_folder: Callable[..., Path],
) -> None:
    folder = app_folder(
        {
            "connectors/payments.py": CONNECTOR,
            "connectors/_helpers.py": "raise RuntimeError('files starting with _ are skipped')\n",
            "workflows/chase.py": WORKFLOW,
            "workflows/_private.py": "raise RuntimeError('files starting with _ are skipped')\n",
        },
        prefix="Ar_Desk",
    )

    app = load_app(folder)

    assert app.name == folder.name.replace("_", "-").lower()
    assert app.name.startswith("ar-desk-")
    assert list(app.workflows) == ["chase-invoice"]
    assert isinstance(app.workflows["chase-invoice"], Workflow)
    # The workflow module imports the connector too; it is counted once.
    assert list(app.connectors) == ["payments", "wakeup", "remit"]
    assert isinstance(app.connectors["payments"], Connector)
    assert set(app.ops) == {
        "payments.invoices.get",
        list_apps.id,
        *(o.id for o in wakeup_connector.ops),
    }


def test_a_folder_with_neither_app_py_nor_workflows(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({"connectors/payments.py": CONNECTOR, "README.md": "nothing here\n"})

    with pytest.raises(AppError) as raised:
        load_app(folder)

    message = str(raised.value)
    assert str(folder) in message
    assert "no app.py declaring `App(...)` and no workflows in workflows/*.py" in message


def test_an_empty_folder(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({})

    with pytest.raises(AppError, match="no workflows in workflows/"):
        load_app(folder)


def test_a_folder_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / f"nowhere_{uuid.uuid4().hex}"

    with pytest.raises(AppError) as raised:
        load_app(missing)

    assert f"--app {missing}: no such folder" in str(raised.value)


@pytest.mark.parametrize("prefix", ["ar-desk", "1desk", "ar desk"])
def test_a_folder_whose_name_is_not_an_identifier(
    app_folder: Callable[..., Path], prefix: str
) -> None:
    folder = app_folder({"app.py": APP, "connectors/payments.py": CONNECTOR}, prefix=prefix)

    with pytest.raises(AppError) as raised:
        load_app(folder)

    message = str(raised.value)
    assert f"app folder `{folder.name}` must be a valid Python package name" in message
    assert "rename the folder" in message
    assert folder.name not in sys.modules


def test_an_app_py_that_raises_on_import(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({"app.py": "raise RuntimeError('no connection to the ERP')\n"})

    with pytest.raises(AppError) as raised:
        load_app(folder)

    message = str(raised.value)
    assert f"{folder / 'app.py'} failed to import" in message
    assert "RuntimeError: no connection to the ERP" in message
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_an_app_py_with_a_syntax_error(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({"app.py": "def broken(:\n"})

    with pytest.raises(AppError) as raised:
        load_app(folder)

    assert f"{folder / 'app.py'} failed to import: SyntaxError" in str(raised.value)


def test_an_app_py_whose_app_is_refused_keeps_the_apps_message(
    app_folder: Callable[..., Path],
) -> None:
    broken = APP.replace('queues=[Queue("slow", concurrency=2)],', "")
    folder = app_folder({"app.py": broken, "connectors/payments.py": CONNECTOR})

    with pytest.raises(AppError) as raised:
        load_app(folder)

    message = str(raised.value)
    assert "workflow `chase-invoice` runs on queue `slow`" in message
    assert "failed to import" not in message


def test_a_discovered_workflow_module_that_raises_names_its_file(
    app_folder: Callable[..., Path],
) -> None:
    folder = app_folder(
        {
            "connectors/payments.py": CONNECTOR,
            "workflows/chase.py": WORKFLOW + "\nraise KeyError('oops')\n",
        }
    )

    with pytest.raises(AppError) as raised:
        load_app(folder)

    assert f"{folder / 'workflows' / 'chase.py'} failed to import: KeyError" in str(raised.value)


def test_an_app_py_declaring_no_app(app_folder: Callable[..., Path]) -> None:
    folder = app_folder({"app.py": "from remit import App\n"})

    with pytest.raises(AppError) as raised:
        load_app(folder)

    assert str(raised.value) == (
        f"{folder / 'app.py'} must declare exactly one `App(...)`; it declares 0"
    )


def test_an_app_py_declaring_two_apps(app_folder: Callable[..., Path]) -> None:
    two = APP + '\nother = App(name="other", workflows=[])\n'
    folder = app_folder({"app.py": two, "connectors/payments.py": CONNECTOR})

    with pytest.raises(AppError, match="must declare exactly one `App"):
        load_app(folder)


def test_an_init_py_that_raises_on_import_names_the_file(
    app_folder: Callable[..., Path],
) -> None:
    # The folder's own __init__.py is imported first; a failure there is the app's code too.
    folder = app_folder(
        {
            "__init__.py": "raise RuntimeError('bad package init')\n",
            "app.py": APP,
            "connectors/payments.py": CONNECTOR,
        }
    )

    with pytest.raises(AppError) as raised:
        load_app(folder)

    message = str(raised.value)
    assert "__init__.py" in message
    assert "RuntimeError: bad package init" in message


def test_a_folder_named_like_an_imported_module_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "json"
    folder.mkdir()
    (folder / "app.py").write_text(APP)
    saved_path = list(sys.path)
    try:
        with pytest.raises(AppError) as raised:
            load_app(folder)
    finally:
        sys.path[:] = saved_path

    assert "a different module named `json` is already imported" in str(raised.value)
    assert str(folder) in str(raised.value)
