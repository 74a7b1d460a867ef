"""JSON the command line takes from a file (`--input @FILE`) or standard input (`--input -`),
capped before it is read whole, and `remit show` cutting long values short unless `--full`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from remit.core.runs import RunStore
from tests.e2e.cli_support import Cli

BIG = 3 * 1024 * 1024  # over the 2 MiB default of REMIT_MAX_INPUT_BYTES
ACCEPTED = 100 * 1024


def _write_off(reason_length: int) -> str:
    return json.dumps({"invoice_id": "inv_1003", "reason": "r" * reason_length})


def _said(done: object) -> str:
    return " ".join(getattr(done, "stderr", "").split())


def test_an_input_over_the_cap_is_refused_from_a_file_and_from_stdin(
    cli: Cli, tmp_path: Path
) -> None:
    big = tmp_path / "big.json"
    big.write_text(_write_off(BIG))
    for args, stdin in (
        (["--input", f"@{big}"], None),
        (["--input", "-"], big.read_text()),
    ):
        done = cli("start", "ar.write-off", *args, check=False, stdin=stdin)
        assert done.returncode == 1, done.stdout + done.stderr
        said = _said(done)
        assert "over the 2 MiB limit (REMIT_MAX_INPUT_BYTES)" in said
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 2
    assert cli("runs").stdout.strip() == "no runs"


def test_an_input_under_the_cap_is_taken_from_a_file_and_from_stdin(
    cli: Cli, tmp_path: Path
) -> None:
    given = tmp_path / "input.json"
    given.write_text(_write_off(ACCEPTED))
    from_file = cli("start", "ar.write-off", "--input", f"@{given}").stdout.strip()
    from_stdin = cli(
        "start", "ar.write-off", "--input", "-", stdin=given.read_text()
    ).stdout.strip()
    runs = RunStore(cli.db)
    for run_id in (from_file, from_stdin):
        assert runs.get(run_id).input == {**json.loads(given.read_text()), "approver": None}


def test_a_file_that_cannot_be_read_or_parsed_is_named_with_where_it_goes_wrong(
    cli: Cli, tmp_path: Path
) -> None:
    missing = cli("start", "ar.write-off", "--input", f"@{tmp_path / 'nope.json'}", check=False)
    assert missing.returncode == 1
    assert f"--input @{tmp_path / 'nope.json'}: the file cannot be read" in _said(missing)

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "invoice_id": "inv_1003",\n  "reason": oops' + "y" * 50_000 + "}")
    bad = cli("start", "ar.write-off", "--input", f"@{broken}", check=False)
    assert bad.returncode == 1
    said = _said(bad)
    assert f"--input @{broken} is not valid JSON: Expecting value at line 3, column 13" in said
    assert "oopsyyy" in said
    assert len(bad.stderr) < 400  # a short quote of the text, not all of it

    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes(b'{"invoice_id": "inv_1003", "reason": "caf\xe9"}')
    latin = cli("start", "ar.write-off", "--input", f"@{not_utf8}", check=False)
    assert latin.returncode == 1
    assert "is not UTF-8 text (byte 42 cannot be read)" in _said(latin)
    assert cli("runs").stdout.strip() == "no runs"


def test_every_json_option_takes_a_file_or_stdin(cli: Cli, tmp_path: Path) -> None:
    record = tmp_path / "contact.json"
    record.write_text(json.dumps({"email": "ap@acme.example", "note": "Acme AP"}))
    put = cli("data", "ar.contacts", "put", "--input", f"@{record}")
    assert "data.ar.contacts.put ok" in put.stderr
    got = cli("call", "data.ar.contacts.get", "--input", "-", stdin='{"email": "ap@acme.example"}')
    assert json.loads(got.stdout)["record"]["note"] == "Acme AP"

    context = cli(
        "policies",
        "explain",
        "start",
        "ar.write-off",
        "--context",
        "-",
        "--as",
        "user:ann",
        stdin='{"input": {"invoice_id": "inv_1003"}}',
        check=False,
    )
    assert "allowed" in context.stdout + context.stderr

    edits = tmp_path / "edits.json"
    edits.write_text("[1, 2]")
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    refused = cli("approve", "apr_none", "--edit", f"@{edits}", check=False)
    assert refused.returncode == 1
    assert "--edit must be a JSON object of fields" in _said(refused)
    assert "not [1, 2]" in _said(refused)
    assert RunStore(cli.db).get(run_id).status == "queued"


def test_show_cuts_long_values_short_unless_full(cli: Cli, tmp_path: Path) -> None:
    given = tmp_path / "input.json"
    reason = "[bold]" + "x" * 1_500_000
    given.write_text(json.dumps({"invoice_id": "inv_1003", "reason": reason}))
    run_id = cli("start", "ar.write-off", "--input", f"@{given}").stdout.strip()

    began = time.monotonic()
    shown = cli("show", run_id).stdout
    took = time.monotonic() - began
    line = next(each for each in shown.splitlines() if each.startswith("  input"))
    whole = json.dumps(RunStore(cli.db).get(run_id).input)
    assert line == f"  input  {whole[:200]}… ({len(whole) - 200} more characters; --full shows all)"
    assert "[bold]" in line  # shown as typed, never read as markup
    assert len(shown) < 2000
    assert took < 30, took

    full = cli("show", run_id, "--full").stdout
    assert whole in "".join(full.splitlines())
