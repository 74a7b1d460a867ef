"""`remit tokens` on the example desk, whose policies let admins (sam) manage tokens; and
`remit serve` refusing to serve tokens in plain HTTP to other machines."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from remit.core.schema import audit, denials, tokens
from tests.e2e.cli_support import Cli


def test_an_admin_makes_lists_and_revokes_a_token_shown_once(cli: Cli) -> None:
    made = cli(
        "tokens",
        "create",
        "--for",
        "user:ann",
        "--expires",
        "30d",
        "--name",
        "laptop",
        "--as",
        "user:sam",
    )
    token = made.stdout.strip()
    assert token.startswith("rmt_")
    assert len(token) == len("rmt_") + 12 + 1 + 43
    assert "acts as user:ann" in made.stderr
    assert "shown this once" in made.stderr
    with cli.db.engine.connect() as conn:
        (row,) = conn.execute(sa.select(tokens)).all()
        kept = [tuple(r) for r in conn.execute(sa.select(tokens))] + [
            tuple(r) for r in conn.execute(sa.select(audit))
        ]
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert token not in repr(kept)  # only its hash is kept
    assert token.split("_", 2)[2] not in repr(kept)  # its secret part (which may hold "_")

    listed = cli("tokens", "list", "--as", "user:sam").stdout
    assert row.id in listed
    assert [w for w in listed.split() if w in ("user:ann", "laptop", "active")] == [
        "user:ann",
        "laptop",
        "active",
    ]

    revoked = cli("tokens", "revoke", row.id, "--as", "user:sam").stdout
    assert f"token {row.id} (user:ann) revoked by user:sam" in revoked
    assert "revoked" in cli("tokens", "list", "--as", "user:sam").stdout
    with cli.db.engine.connect() as conn:
        actions = conn.execute(sa.select(audit.c.action, audit.c.actor)).all()
    assert actions == [("token.created", "user:sam"), ("token.revoked", "user:sam")]


def test_tokens_are_refused_to_all_but_admins_and_bad_input_says_what_to_change(
    cli: Cli,
) -> None:
    for args, message in [
        (["create", "--for", "user:ann"], 'user:ann may not manage_tokens App::"acme"'),
        (
            ["create", "--for", "user:carol", "--as", "user:carol"],
            "user:carol may not manage_tokens",
        ),
        (["list"], "user:ann may not manage_tokens"),
        (
            ["create", "--for", "user:ann", "--expires", "soon", "--as", "user:sam"],
            "not a duration",
        ),
        (["create", "--for", "remit:expiry", "--as", "user:sam"], "principals are remit's own"),
        (["create", "--for", "ann", "--as", "user:sam"], "is not a principal policies know"),
        (["revoke", "tok_nope", "--as", "user:sam"], "no token `tok_nope`"),
    ]:
        refused = cli("tokens", *args, check=False)
        assert refused.returncode == 1, (args, refused.stdout)
        assert message in refused.stderr, (args, refused.stderr)
        assert "rmt_" not in refused.stdout
    with cli.db.engine.connect() as conn:
        assert conn.execute(sa.select(tokens)).all() == []
        assert len(conn.execute(sa.select(denials)).all()) == 3


def test_serve_refuses_plain_http_on_an_address_other_machines_reach(cli: Cli) -> None:
    exposed = cli("serve", "--host", "0.0.0.0", "--port", "0", check=False)
    assert exposed.returncode == 1
    assert "--host 0.0.0.0 is reached from other machines" in exposed.stderr
    assert "--tls-cert and --tls-key" in exposed.stderr
    assert "--behind-proxy" in exposed.stderr
    half = cli("serve", "--tls-cert", "cert.pem", "--port", "0", check=False)
    assert half.returncode == 1
    assert "give both --tls-cert and --tls-key" in half.stderr
