"""Redacting known secret values: in text, in JSON at any depth, in exceptions and log lines."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from remit.core import redact
from remit.core.errors import DriverError
from remit.core.redact import RedactedError, RedactLogs, Redactor

TOKEN = "mailtok_8fK2pQ9zR4vX"
KEY = "sk-live-Zq81mWx0"


@pytest.fixture
def secrets() -> Redactor:
    return Redactor.of({"MAIL_TOKEN": TOKEN, "SHOP_KEY": KEY})


def test_each_value_is_replaced_by_a_marker_naming_its_secret(secrets: Redactor) -> None:
    text = f"auth with {TOKEN} failed; retried with {KEY}, then {TOKEN} again"

    assert secrets.text(text) == (
        "auth with [redacted:MAIL_TOKEN] failed; retried with [redacted:SHOP_KEY], "
        "then [redacted:MAIL_TOKEN] again"
    )
    assert secrets.finds(text)
    assert not secrets.finds("nothing secret here")
    assert secrets.text("nothing secret here") == "nothing secret here"


def test_strings_anywhere_inside_json_are_redacted_keys_too(secrets: Redactor) -> None:
    value = {
        "note": f"token={TOKEN}",
        "headers": [{"Authorization": f"Bearer {KEY}"}, ("tuple", TOKEN)],
        TOKEN: {"nested": [[f"x{KEY}y"]]},
        "count": 3,
        "flag": True,
        "none": None,
    }

    assert secrets.json(value) == {
        "note": "token=[redacted:MAIL_TOKEN]",
        "headers": [
            {"Authorization": "Bearer [redacted:SHOP_KEY]"},
            ("tuple", "[redacted:MAIL_TOKEN]"),
        ],
        "[redacted:MAIL_TOKEN]": {"nested": [["x[redacted:SHOP_KEY]y"]]},
        "count": 3,
        "flag": True,
        "none": None,
    }
    assert secrets.names_in(value) == ["MAIL_TOKEN", "SHOP_KEY"]


def test_a_value_inside_a_longer_one_gives_way_to_the_longer() -> None:
    short, long = "abcdef12", "abcdef12-and-more"
    secrets = Redactor.of({"SHORT": short, "LONG": long})

    assert secrets.values[0] == (long, "LONG")  # longest first
    assert secrets.text(f"{long} and {short}") == "[redacted:LONG] and [redacted:SHORT]"


def test_overlapping_values_are_replaced_as_one_stretch_naming_both() -> None:
    secrets = Redactor.of({"LEFT": "aaaa-bbbb", "RIGHT": "bbbb-cccc"})

    redacted = secrets.text("x aaaa-bbbb-cccc y")

    assert redacted == "x [redacted:LEFT,RIGHT] y"
    for piece in ("aaaa", "bbbb", "cccc"):
        assert piece not in redacted


def test_repeated_and_self_overlapping_occurrences_leave_no_piece() -> None:
    secrets = Redactor.of({"ZEROS": "000000"})

    assert secrets.text("0000000 and 000000") == "[redacted:ZEROS] and [redacted:ZEROS]"


def test_values_shorter_than_six_characters_are_not_redacted() -> None:
    secrets = Redactor.of({"PIN": "1234", "ADMIN": "admin", "LONGER": "secret"})

    assert redact.SHORTEST == 6
    assert [name for _, name in secrets.values] == ["LONGER"]
    assert secrets.text("admin 1234 secret") == "admin 1234 [redacted:LONGER]"
    assert not Redactor.of({"PIN": "1234"})
    assert Redactor.of({"PIN": "1234"}).json({"a": "1234"}) == {"a": "1234"}


def test_one_value_under_two_names_is_named_once() -> None:
    secrets = Redactor.of([("B_TOKEN", TOKEN), ("A_TOKEN", TOKEN)])

    assert secrets.text(TOKEN) == "[redacted:A_TOKEN]"


def test_merged_redactors_know_both(secrets: Redactor) -> None:
    merged = Redactor.of({"OTHER": "other-value"}).merged(secrets)

    assert merged.text(f"{TOKEN} other-value") == "[redacted:MAIL_TOKEN] [redacted:OTHER]"
    assert Redactor().merged(secrets) is secrets


def test_an_exception_is_redacted_in_place_fields_notes_and_chain(secrets: Redactor) -> None:
    raised: BaseException | None = None
    try:
        try:
            raise KeyError(f"no such key {KEY}")
        except KeyError as inner:
            error = DriverError(
                f"vendor refused {TOKEN}", retryable=True, status=401, vendor_code=TOKEN
            )
            error.add_note(f"sent {KEY}")
            raise error from inner
    except DriverError as error:
        raised = error
    assert raised is not None
    redacted = secrets.exception(raised)

    assert redacted is raised
    assert isinstance(redacted, DriverError)
    assert str(redacted) == "vendor refused [redacted:MAIL_TOKEN]"
    assert redacted.vendor_code == "[redacted:MAIL_TOKEN]"
    assert (redacted.retryable, redacted.status, redacted.maybe_applied) == (True, 401, False)
    assert redacted.__notes__ == ["sent [redacted:SHOP_KEY]"]
    assert str(redacted.__cause__) == "'no such key [redacted:SHOP_KEY]'"
    assert redacted.__traceback__ is not None


def test_an_oserror_has_its_message_and_file_redacted(secrets: Redactor) -> None:
    error = FileNotFoundError(2, f"missing {TOKEN}", f"/tmp/{KEY}")

    secrets.exception(error)

    assert TOKEN not in str(error)
    assert KEY not in str(error)
    assert error.filename == "/tmp/[redacted:SHOP_KEY]"


class Opaque(Exception):
    """An exception whose message is computed from state redaction cannot reach."""

    def __str__(self) -> str:
        return f"computed from {TOKEN}"


def test_an_exception_that_cannot_be_redacted_in_place_is_stood_in_for(
    secrets: Redactor,
) -> None:
    stand_in = secrets.exception(Opaque())

    assert isinstance(stand_in, RedactedError)
    assert str(stand_in) == "Opaque: computed from [redacted:MAIL_TOKEN]"
    assert stand_in.type_name == "Opaque"


def test_a_driver_error_that_cannot_be_redacted_in_place_stays_a_driver_error(
    secrets: Redactor,
) -> None:
    class Computed(DriverError):
        def __str__(self) -> str:
            return f"computed {TOKEN}"

    stand_in = secrets.exception(Computed("x", retryable=True, status=503, op="mail.send"))

    assert type(stand_in) is DriverError
    assert str(stand_in) == "computed [redacted:MAIL_TOKEN]"
    assert (stand_in.retryable, stand_in.status, stand_in.maybe_applied) == (True, 503, True)
    assert stand_in.op == "mail.send"


def test_a_chained_exception_that_cannot_be_redacted_is_cut_off(secrets: Redactor) -> None:
    error = ValueError("outer")
    error.__context__ = Opaque()

    assert secrets.exception(error) is error
    assert error.__context__ is None


def test_with_no_secrets_nothing_is_touched() -> None:
    error = ValueError(TOKEN)

    assert Redactor().exception(error) is error
    assert error.args == (TOKEN,)
    assert Redactor().text(TOKEN) == TOKEN


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("remit.test_redact")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    redact.forget()


def test_learned_values_are_redacted_from_remit_log_lines(lines: Lines) -> None:
    logger = logging.getLogger("remit.test_redact")
    logger.info("before: %s", TOKEN)
    redact.learn(Redactor.of({"MAIL_TOKEN": TOKEN}))
    logger.info("call failed (%s)", f"bad {TOKEN}")
    try:
        raise ValueError(f"token {TOKEN}")
    except ValueError:
        logger.exception("it raised")

    assert lines.lines[0] == f"remit.test_redact: before: {TOKEN}"  # not known yet
    assert lines.lines[1] == "remit.test_redact: call failed (bad [redacted:MAIL_TOKEN])"
    assert "ValueError: token [redacted:MAIL_TOKEN]" in lines.lines[2]
    assert TOKEN not in "\n".join(lines.lines[1:])
    assert any(isinstance(f, RedactLogs) for f in logging.getLogger("remit").filters)
    assert any(isinstance(f, RedactLogs) for f in logging.getLogger("dbos").filters)


def test_a_logger_made_after_values_were_learned_is_redacted_too(lines: Lines) -> None:
    redact.learn(Redactor.of({"MAIL_TOKEN": TOKEN}))
    later = logging.getLogger("remit.test_redact.made_later")
    redact.learn(Redactor.of({"SHOP_KEY": KEY}))
    later.warning("%s and %s", TOKEN, KEY)

    assert lines.lines == [
        "remit.test_redact.made_later: [redacted:MAIL_TOKEN] and [redacted:SHOP_KEY]"
    ]
