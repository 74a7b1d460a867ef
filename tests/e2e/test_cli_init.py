"""`remit init`: a new repo passes `remit test` at once (its scenarios on SQLite or Postgres,
its own test beside them), and so does the repo with a second app `remit init` added; the demo
plays the session it comes with; the code it writes is lint- and type-clean; and a target that
exists or a name remit cannot load is refused, with nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def remit(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`remit ARGS` in folder `cwd`, importing this checkout's remit."""
    paths = [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.run(
        [sys.executable, "-m", "remit", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def made(tmp_path: Path, name: str = "acme_ops") -> Path:
    done = remit("init", name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / name


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_new_repo_and_a_second_app_pass_remit_test(tmp_path: Path, database_url: str) -> None:
    done = remit("init", "acme_ops", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    repo = tmp_path / "acme_ops"
    assert "made the repo acme_ops in acme_ops:" in done.stdout
    for line in ("├── connectors/", "│   └── shop.py", "│       │   └── refund.feature"):
        assert line in done.stdout
    assert done.stdout.endswith("next:\n  cd acme_ops\n" + _TEST_AND_DEMO)
    assert files_under(repo) == {
        ".gitignore",
        "README.md",
        "__init__.py",
        "pyproject.toml",
        "apps/acme_ops/workflows/refund.py",
        "apps/acme_ops/scenarios/refund.feature",
        "apps/acme_ops/scenarios/policies.feature",
        "connectors/shop.py",
        "demo/session.txt",
        "policies/principals.toml",
        "policies/acme_ops.cedar",
        "tests/__init__.py",
        "tests/test_acme_ops.py",
        "tests/test_shop_driver.py",
    }
    assert ".remit/" in (repo / ".gitignore").read_text().splitlines()

    # The scenarios on the database under test's kind; the repo's own test on SQLite.
    server = "sqlite" if database_url.startswith("sqlite") else database_url
    tested = remit("test", "--database-url", server, "-v", cwd=repo)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "7 passed" in tested.stdout
    for passed in (
        "tests/test_shop_driver.py::test_a_refund_is_tried_again_after_a_429",
        "apps/acme_ops/scenarios/refund.feature::Refunding an order: A manager approves a refund",
        "tests/test_acme_ops.py::test_a_manager_approves_a_refund",
    ):
        assert f"{passed} PASSED" in tested.stdout, tested.stdout

    before = files_under(repo)
    added = remit("init", "billing", cwd=repo)
    assert added.returncode == 0, added.stdout + added.stderr
    assert f"added the app billing to the repo acme_ops in {repo.resolve()}:" in added.stdout
    assert "│   └── billing_shop.py" in added.stdout
    assert added.stdout.endswith("next:\n" + _TEST_AND_DEMO)
    assert files_under(repo) - before == {
        "apps/billing/workflows/refund.py",
        "apps/billing/scenarios/refund.feature",
        "apps/billing/scenarios/policies.feature",
        "connectors/billing_shop.py",
        "policies/billing.cedar",
        "tests/test_billing.py",
    }

    tested = remit("test", "--database-url", server, "-v", cwd=repo)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "13 passed" in tested.stdout
    for app in ("acme_ops", "billing"):
        for scenario in (
            "refund.feature::Refunding an order: A manager approves a refund",
            "refund.feature::Refunding an order: A manager refunds less than the order",
            "refund.feature::Refunding an order: A manager may change only the amount",
            "policies.feature::Who may refund: A clerk may not approve a refund",
            "policies.feature::Who may refund: Only a clerk may ask for one",
        ):
            assert f"apps/{app}/scenarios/{scenario}" in tested.stdout
        assert f"tests/test_{app}.py::test_a_manager_approves_a_refund PASSED" in tested.stdout
    assert "FAILED" not in tested.stdout


OPS_REPO = Path(__file__).resolve().parents[1] / "apps" / "ops_repo"
HELLO = """\
from pydantic import BaseModel

from remit import Context, workflow


class Hello(BaseModel):
    who: str = "world"


@workflow(name="hello", input=Hello)
def hello(ctx: Context, input: Hello) -> str:
    return f"hello {input.who}"
"""


@pytest.mark.parametrize("policies", [True, False], ids=["with policies", "without policies"])
def test_an_app_added_to_a_repo_of_others_passes_remit_test(
    tmp_path: Path, database_url: str, policies: bool
) -> None:
    """Into a repo `remit init` did not make: one with apps, a shared connector and policies of
    its own (`tests/apps/ops_repo`), or one with only a root workflow, which allows everything
    and is left so (no policy file, no scenarios of refusals)."""
    repo = tmp_path / "company"
    if policies:
        shutil.copytree(OPS_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (repo / "workflows").mkdir(parents=True)
        (repo / "workflows" / "hello.py").write_text(HELLO)
    before = files_under(repo)
    added = remit("init", "billing", cwd=repo)
    assert added.returncode == 0, added.stdout + added.stderr
    extra = {"policies/billing.cedar", "apps/billing/scenarios/policies.feature"}
    assert files_under(repo) - before == {
        "apps/billing/workflows/refund.py",
        "apps/billing/scenarios/refund.feature",
        "connectors/billing_shop.py",
        "tests/test_billing.py",
        *(extra if policies else ()),
    }
    server = "sqlite" if database_url.startswith("sqlite") else database_url
    tested = remit("test", "--database-url", server, cwd=repo)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert f"{6 if policies else 4} passed" in tested.stdout


_TEST_AND_DEMO = (
    "  remit test    # its scenarios and tests, on the fakes\n"
    "  remit demo    # the repo in one process on the fakes, seeded by the scenarios\n"
)


def test_the_demo_plays_the_session_the_repo_comes_with(tmp_path: Path) -> None:
    repo = made(tmp_path)
    played = remit("demo", "--script", "demo/session.txt", cwd=repo)
    assert played.returncode == 0, played.stdout + played.stderr
    assert "demo/session.txt: every line behaved" in played.stderr
    # Seeded by the scenarios' background, refunded by the run carol approved.
    assert "approved by user:carol" in played.stdout
    assert "│ ord_1    │ ord_1@customers.example │ 1200   │ 1200     │" in played.stdout


def test_its_admins_may_connect_the_repo_to_a_wakeup_service(tmp_path: Path) -> None:
    repo = made(tmp_path)
    for action, resource in [
        ("set_secret", "REMIT_WAKEUP_TOKEN"),
        ("call", "wakeup.instances.create"),
    ]:
        allowed = remit("policies", "explain", action, resource, "--as", "user:sam", cwd=repo)
        assert allowed.returncode == 0, allowed.stdout + allowed.stderr
        assert allowed.stdout.startswith("allowed: permitted by policies/acme_ops.cedar:")
        clerk = remit("policies", "explain", action, resource, "--as", "user:ann", cwd=repo)
        assert clerk.returncode == 1


def test_whoever_started_a_run_may_withdraw_its_gates(tmp_path: Path) -> None:
    repo = made(tmp_path)
    for is_requester, code in [(True, 0), (False, 1)]:
        context = json.dumps(
            {
                "requester": "user:ann",
                "is_requester": is_requester,
                "workflow": "refund",
                "input": {},
                "draft": {},
            }
        )
        asked = ("withdraw", "acme-ops-refund", "--as", "user:ann", "--context", context)
        explained = remit("policies", "explain", *asked, cwd=repo)
        assert explained.returncode == code, explained.stdout + explained.stderr
        if is_requester:
            assert explained.stdout.startswith("allowed: permitted by policies/acme_ops.cedar:")


def test_the_code_it_writes_is_lint_and_type_clean(tmp_path: Path) -> None:
    repo = made(tmp_path)
    assert remit("init", "billing", cwd=repo).returncode == 0
    # Under the repo's own settings (its pyproject.toml), where remit is a third-party package.
    for check in (["ruff", "check", "."], ["ruff", "format", "--check", "."]):
        done = subprocess.run(
            [sys.executable, "-m", *check], cwd=repo, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    config = tmp_path / "mypy.ini"
    config.write_text(
        "[mypy]\nstrict = true\nplugins = pydantic.mypy\nexplicit_package_bases = true\n"
    )
    typed = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "acme_ops"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("Acme-Ops", "`Acme-Ops` cannot name a repo"),
        ("1ops", "`1ops` cannot name a repo"),
        ("class", "`class` cannot name a repo"),
        ("json", "`json` is already the name of a Python module here"),
    ],
)
def test_a_name_remit_cannot_load_is_refused(tmp_path: Path, name: str, said: str) -> None:
    done = remit("init", name, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    (tmp_path / "acme_ops").mkdir()
    (tmp_path / "acme_ops" / "notes.txt").write_text("mine\n")
    done = remit("init", "acme_ops", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{tmp_path / 'acme_ops'} exists and is not empty" in done.stderr
    assert files_under(tmp_path) == {"acme_ops/notes.txt"}
    # An empty folder of that name is used.
    (tmp_path / "acme_ops" / "notes.txt").unlink()
    assert (made(tmp_path) / "README.md").exists()


def test_an_app_is_refused_when_it_would_overwrite_anything(tmp_path: Path) -> None:
    repo = made(tmp_path)
    before = files_under(repo)
    bad = remit("init", "Billing", cwd=repo)
    assert bad.returncode == 1
    assert "`Billing` cannot name the app `apps/Billing`" in bad.stderr
    assert "e.g. `billing`" in bad.stderr

    (repo / "tests" / "test_billing.py").write_text("# mine\n")
    taken = remit("init", "billing", cwd=repo)
    assert taken.returncode == 1
    assert "adding the app `billing` would overwrite tests/test_billing.py" in taken.stderr
    assert (repo / "tests" / "test_billing.py").read_text() == "# mine\n"
    assert files_under(repo) == before | {"tests/test_billing.py"}

    again = remit("init", "acme_ops", cwd=repo)
    assert again.returncode == 1
    assert f"the app {repo / 'apps' / 'acme_ops'} exists already" in again.stderr
    assert files_under(repo) == before | {"tests/test_billing.py"}


def test_a_repo_whose_app_py_lists_its_connectors_is_refused(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("# the App, declared by hand\n")
    done = remit("init", "billing", "--app", str(tmp_path), cwd=tmp_path.parent)
    assert done.returncode == 1
    assert f"{tmp_path / 'app.py'} declares the repo's App and lists its connectors" in done.stderr
    assert files_under(tmp_path) == {"app.py"}
