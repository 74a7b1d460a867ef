"""`remit login-link` and `remit passwords set` on the example desk, whose policies let admins
(sam) make links and set passwords: on the database, and through `remit serve` (`REMIT_URL`)
from a machine with no database."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import sqlalchemy as sa

from remit.core.schema import audit, login_links, passwords
from remit.policy.signin import SignIns
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import Remote, _listening

CODE = r"rml_[0-9a-f]{12}_[A-Za-z0-9_-]{43}"
PASSWORD = "correct horse battery staple"


def _code(printed: str, base: str) -> str:
    found = re.fullmatch(re.escape(base) + r"/console/sign-in\?code=(" + CODE + ")", printed)
    assert found, printed
    return found.group(1)


def test_an_admin_prints_a_link_that_signs_in_once_and_sets_a_password(cli: Cli) -> None:
    made = cli("login-link", "--for", "user:ann", "--as", "user:sam")
    code = _code(made.stdout.strip(), "http://127.0.0.1:8700")
    assert "a sign-in link for user:ann: it works once" in made.stderr
    elsewhere = cli(
        "login-link", "--for", "user:carol", "--base-url", "https://desk.example.com/", "--as",
        "user:sam", "--expires", "1h",
    )  # fmt: skip
    other = _code(elsewhere.stdout.strip(), "https://desk.example.com")
    signins = SignIns(cli.db, "acme")
    assert signins.redeem(code) == "user:ann"
    assert signins.redeem(other) == "user:carol"

    cli("passwords", "set", "--for", "user:carol", "--as", "user:sam", stdin=PASSWORD + "\n")
    assert signins.check_password("user:carol", PASSWORD)
    assert not signins.check_password("user:carol", PASSWORD + "\n")
    with cli.db.engine.connect() as conn:
        actions = conn.execute(sa.select(audit.c.action, audit.c.actor).order_by(audit.c.id))
        assert actions.all() == [
            ("login_link.created", "user:sam"),
            ("login_link.created", "user:sam"),
            ("login_link.used", "user:ann"),
            ("login_link.used", "user:carol"),
            ("password.set", "user:sam"),
        ]


def test_refusals_say_what_to_change_and_make_nothing(cli: Cli) -> None:
    for args, stdin, message in [
        (["login-link", "--for", "user:ann"], None, 'user:ann may not manage_tokens App::"acme"'),
        (["login-link", "--for", "user:ann", "--as", "user:sam", "--expires", "8d"], None, "7d"),
        (["login-link", "--for", "ann", "--as", "user:sam"], None, "not a principal policies"),
        (
            ["login-link", "--for", "user:ann", "--as", "user:sam", "--base-url", "desk.example"],
            None,
            "--base-url 'desk.example' is not an http:// or https:// address",
        ),
        (["passwords", "set", "--for", "user:ann", "--as", "user:sam"], "short\n", "at least 12"),
        (["passwords", "set", "--for", "user:ann"], PASSWORD, "user:ann may not manage_tokens"),
    ]:
        refused = cli(*args, stdin=stdin, check=False)
        assert refused.returncode == 1, (args, refused.stdout)
        assert message in refused.stderr, (args, refused.stderr)
        assert "rml_" not in refused.stdout
    with cli.db.engine.connect() as conn:
        assert conn.execute(sa.select(login_links)).all() == []
        assert conn.execute(sa.select(passwords)).all() == []


def test_through_remit_url_the_link_names_the_server_and_the_token_acts(
    cli: Cli, tmp_path: Path
) -> None:
    sam = cli("tokens", "create", "--for", "user:sam", "--as", "user:sam").stdout.strip()
    ann = cli("tokens", "create", "--for", "user:ann", "--as", "user:sam").stdout.strip()
    cli.spawn("serve", "--port", "0")
    url = _listening(cli, 0)
    nowhere = tmp_path / "operator"
    nowhere.mkdir()
    remit = Remote(url, nowhere)

    code = _code(remit("login-link", "--for", "user:ann", token=sam).stdout.strip(), url)
    assert SignIns(cli.db, "acme").redeem(code) == "user:ann"
    refused = remit("login-link", "--for", "user:ann", token=ann, check=False)
    assert refused.returncode == 1
    assert "user:ann may not manage_tokens" in refused.stderr
    too_long = remit("login-link", "--for", "user:ann", "--expires", "8d", token=sam, check=False)
    assert too_long.returncode == 1
    assert "is not how long a sign-in link may last" in too_long.stderr

    def passwords_set(token: str, typed: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "remit", "--app", str(nowhere), "passwords", "set", "--for",
             "user:ann"],
            input=typed, env={**remit.env, "REMIT_TOKEN": token}, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip

    done = passwords_set(sam, PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert SignIns(cli.db, "acme").check_password("user:ann", PASSWORD)
    short = passwords_set(sam, "too short\n")
    assert short.returncode == 1
    assert "at least 12 characters" in short.stderr
    assert passwords_set(ann, PASSWORD).returncode == 1


def test_a_sign_in_code_reaches_no_log_line_of_the_server_even_at_debug(cli: Cli) -> None:
    cli.env["REMIT_LOG_LEVEL"] = "DEBUG"
    made = cli("login-link", "--for", "user:ann", "--as", "user:sam").stdout.strip()
    code = _code(made, "http://127.0.0.1:8700")
    server = cli.spawn("serve", "--port", "0")
    url = _listening(cli, 0)
    page = httpx.get(f"{url}/console/sign-in?code={code}", timeout=30)
    assert page.status_code == 200  # the page that asks to sign in: the GET spends nothing
    token = cli("tokens", "create", "--for", "user:ann", "--as", "user:sam").stdout.strip()
    assert httpx.get(f"{url}/runs?token={token}", timeout=30).status_code == 401
    server.send_signal(signal.SIGTERM)
    assert server.wait(60) == 0, cli.log(0)
    logged = cli.log(0)
    assert '"GET /console/sign-in?code=[redacted] HTTP/1.1" 200' in logged, logged[-3000:]
    assert "DEBUG" in logged  # the level it was asked for
    for secret in (code.split("_", 2)[2], token.split("_", 2)[2]):  # after the prefix and id
        assert secret not in logged
    assert SignIns(cli.db, "acme").redeem(code) == "user:ann"
