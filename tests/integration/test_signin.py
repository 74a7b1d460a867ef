"""Signing in to the console (`policy/signin.py`): one-time links, sessions, passwords, each act
audited, on both databases; and the client's verbs for them under the example desk's policies
(admins such as sam may `manage_tokens`, clerks such as ann may not)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher

from remit import Client, PolicyDenied, RemitError
from remit.app import load_app
from remit.core.database import Database
from remit.core.errors import Unauthenticated
from remit.core.schema import audit, denials, login_links, passwords, sessions, signin_failures
from remit.policy.signin import SignIns, address_of
from remit.testing import ManualClock

ACME = Path(__file__).parent.parent.parent / "examples" / "acme"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def signins(db: Database, clock: ManualClock) -> SignIns:
    return SignIns(db, "acme", clock=clock)


@pytest.fixture
def desk(database_url: str, clock: ManualClock) -> Iterator[Client]:
    with Client.connect(
        load_app(ACME), database_url, by="user:sam", clock=clock, environ={}
    ) as client:
        yield client


def _audit(db: Database) -> list[tuple[str, str, str]]:
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(audit.c.action, audit.c.actor, audit.c.target))
        return [tuple(row) for row in rows]


def test_a_link_signs_in_once_and_keeps_only_its_hash(db: Database, signins: SignIns) -> None:
    info, code = signins.link("user:ann", by="user:sam")
    assert code.startswith("rml_")
    assert len(code) == len("rml_") + 12 + 1 + 43
    assert info.id == f"lnk_{code[4:16]}"
    with db.engine.connect() as conn:
        (row,) = conn.execute(sa.select(login_links)).all()
        kept = repr([tuple(r) for r in conn.execute(sa.select(audit))]) + repr(tuple(row))
    assert row.digest == hashlib.sha256(code.encode()).hexdigest()
    assert code.split("_", 2)[2] not in kept
    assert row.expires_at == info.created_at + timedelta(minutes=15)

    assert signins.redeem(code) == "user:ann"
    with pytest.raises(Unauthenticated) as again:
        signins.redeem(code)
    assert str(again.value) == (
        "this sign-in link was used already: ask for a new one (`remit login-link --for user:ann`)"
    )
    forged = code[:-1] + ("A" if code[-1] != "A" else "B")
    with pytest.raises(Unauthenticated, match="not one of this app's"):
        signins.redeem(forged)
    with pytest.raises(Unauthenticated, match=r"that is not a sign-in code \(rml_\.\.\.\)"):
        signins.redeem("rmt_0123456789ab_" + "x" * 43)
    with pytest.raises(Unauthenticated, match="not one of this app's"):
        SignIns(db, "another-app").redeem(signins.link("user:ann", by="user:sam")[1])
    assert _audit(db)[:2] == [
        ("login_link.created", "user:sam", info.id),
        ("login_link.used", "user:ann", info.id),
    ]


def test_an_expired_link_is_refused_and_bad_links_are_not_made(
    signins: SignIns, clock: ManualClock
) -> None:
    _, code = signins.link("agent:ar-bot", by="user:sam", expires_in=timedelta(minutes=5))
    clock.advance(minutes=5)
    with pytest.raises(Unauthenticated) as expired:
        signins.redeem(code)
    assert "this sign-in link expired at" in str(expired.value)
    assert "`remit login-link --for agent:ar-bot`" in str(expired.value)

    for principal, message in [
        ("ann", "is not a principal policies know"),
        ("remit:expiry", "principals are remit's own"),
        ("", "a principal is 1 to 200 characters"),
    ]:
        with pytest.raises(RemitError, match=message):
            signins.link(principal, by="user:sam")
    with pytest.raises(RemitError, match="at most 7d: a link is for signing in soon"):
        signins.link("user:ann", by="user:sam", expires_in=timedelta(days=8))


@pytest.mark.parametrize("attempt", range(5))
def test_of_two_redeems_at_once_only_one_signs_in(signins: SignIns, attempt: int) -> None:
    _, code = signins.link("user:ann", by="user:sam")
    start = threading.Barrier(2)
    won: list[str] = []
    refused: list[str] = []

    def redeem() -> None:
        start.wait()
        try:
            won.append(signins.redeem(code))
        except Unauthenticated as error:
            refused.append(str(error))

    threads = [threading.Thread(target=redeem) for _ in range(2)]
    for each in threads:
        each.start()
    for each in threads:
        each.join(30)
    assert won == ["user:ann"]
    assert len(refused) == 1
    assert "was used already" in refused[0]
    with signins.db.engine.connect() as conn:
        used = conn.execute(sa.select(audit).where(audit.c.action == "login_link.used")).all()
    assert len(used) == 1


def test_a_session_works_until_it_ends_or_expires(
    db: Database, signins: SignIns, clock: ManualClock
) -> None:
    info, token = signins.open_session("user:ann", via="link")
    assert token.startswith("rms_")
    assert len(token) == len("rms_") + 12 + 1 + 43
    assert (info.principal, info.via) == ("user:ann", "link")
    assert info.expires_at == info.created_at + timedelta(hours=12)
    with db.engine.connect() as conn:
        (row,) = conn.execute(sa.select(sessions)).all()
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert signins.session(token) == "user:ann"

    signins.end_session(token)
    signins.end_session(token)  # already ended: nothing more happens
    with pytest.raises(Unauthenticated, match="this session was signed out: sign in again"):
        signins.session(token)
    with pytest.raises(Unauthenticated, match="not one of this app's"):
        signins.session(token[:-1] + ("A" if token[-1] != "A" else "B"))
    with pytest.raises(Unauthenticated, match="the session cookie is not a remit session"):
        signins.session("nonsense")

    _, later = signins.open_session("user:carol", via="password", expires_in=timedelta(hours=1))
    clock.advance(hours=1)
    with pytest.raises(Unauthenticated, match=r"this session expired at .*: sign in again"):
        signins.session(later)
    assert [(action, actor) for action, actor, _ in _audit(db)] == [
        ("session.opened", "user:ann"),
        ("session.ended", "user:ann"),
        ("session.opened", "user:carol"),
    ]


def test_a_password_is_checked_and_kept_as_an_argon2id_hash(db: Database, signins: SignIns) -> None:
    signins.set_password("user:ann", PASSWORD, by="user:sam")
    with db.engine.connect() as conn:
        (row,) = conn.execute(sa.select(passwords)).all()
    assert row.hash.startswith("$argon2id$")
    assert PASSWORD not in repr(tuple(row))
    assert (row.principal, row.set_by) == ("user:ann", "user:sam")
    assert signins.check_password("user:ann", PASSWORD)
    assert not signins.check_password("user:ann", PASSWORD + "!")
    assert not signins.check_password("user:carol", PASSWORD)  # has no password
    assert not signins.check_password("not a principal", PASSWORD)
    assert not SignIns(db, "another-app").check_password("user:ann", PASSWORD)

    signins.set_password("user:ann", "another long passphrase", by="user:sam")
    assert not signins.check_password("user:ann", PASSWORD)
    assert signins.check_password("user:ann", "another long passphrase")
    with pytest.raises(RemitError) as short:
        signins.set_password("user:ann", "tooshort", by="user:sam")
    assert str(short.value) == (
        "the password is 8 characters long: give at least 12 (a few words will do)"
    )
    with pytest.raises(RemitError, match="principals are remit's own"):
        signins.set_password("remit:expiry", PASSWORD, by="user:sam")
    longest = "x" * 1024
    signins.set_password("user:carol", longest, by="user:sam")
    assert signins.check_password("user:carol", longest)
    assert not signins.check_password("user:carol", longest + "y")  # not cut to fit, refused
    assert _audit(db) == [
        ("password.set", "user:sam", "password:user:ann"),
        ("password.set", "user:sam", "password:user:ann"),
        ("password.set", "user:sam", "password:user:carol"),
    ]


def test_a_hash_made_at_an_older_cost_is_hashed_again_when_it_is_next_checked(
    db: Database, signins: SignIns
) -> None:
    signins.set_password("user:ann", PASSWORD, by="user:sam")
    cheap = PasswordHasher(time_cost=1, memory_cost=8192).hash(PASSWORD)
    with db.begin() as conn:
        conn.execute(passwords.update().values(hash=cheap))
    assert signins.check_password("user:ann", PASSWORD)
    with db.engine.connect() as conn:
        (row,) = conn.execute(sa.select(passwords)).all()
    assert row.hash != cheap
    assert not PasswordHasher().check_needs_rehash(row.hash)
    assert row.set_by == "user:sam"
    assert signins.check_password("user:ann", PASSWORD)


THERE = "203.0.113.9"  # where the guesses come from
HERE = "198.51.100.7"  # where ann is


def test_five_wrong_passwords_lock_their_address_for_that_principal_longer_each_time(
    signins: SignIns, clock: ManualClock
) -> None:
    signins.set_password("user:ann", PASSWORD, by="user:sam")

    def check(password: str, address: str = THERE) -> bool:
        return signins.check_password("user:ann", password, address=address)

    for _ in range(4):
        assert not check("a wrong guess!")
    assert check(PASSWORD)  # the right one starts the count again
    for _ in range(5):
        assert not check("a wrong guess!")
    assert check(PASSWORD)  # five wrong lock nothing yet
    for _ in range(6):
        assert not check("a wrong guess!")
    # The sixth locked it there for 30 s: the right password too is refused, with the time to
    # wait; from another address ann signs in.
    with pytest.raises(Unauthenticated) as locked:
        check(PASSWORD)
    assert str(locked.value) == (
        "too many wrong passwords for user:ann from this address: try again in 30s, or sign in "
        "by a link (`remit login-link --for user:ann`)"
    )
    assert check(PASSWORD, address=HERE)
    clock.advance(seconds=20)
    with pytest.raises(Unauthenticated, match="try again in 10s"):
        check(PASSWORD)
    clock.advance(seconds=10)
    assert not check("a wrong guess!")  # the seventh: 60 s
    with pytest.raises(Unauthenticated, match="try again in 1m"):
        check(PASSWORD)
    for _ in range(4):  # each wrong one after a lock doubles it, up to 15 minutes
        clock.advance(seconds=900)
        assert not check("a wrong guess!")
    # That is 20 wrong from there in all: one more and the address would be locked for all.
    with pytest.raises(Unauthenticated, match="try again in 15m"):
        check(PASSWORD)
    # Another principal is not locked there, and a new password unlocks.
    signins.set_password("user:carol", PASSWORD, by="user:sam")
    assert signins.check_password("user:carol", PASSWORD, address=THERE)
    signins.set_password("user:ann", "a new long passphrase", by="user:sam")
    assert check("a new long passphrase")


def test_a_count_is_forgotten_fifteen_minutes_after_its_latest_wrong_password(
    signins: SignIns, clock: ManualClock
) -> None:
    signins.set_password("user:ann", PASSWORD, by="user:sam")
    for _ in range(5):
        assert not signins.check_password("user:ann", "a wrong guess!", address=THERE)
    clock.advance(seconds=901)
    assert not signins.check_password("user:ann", "a wrong guess!", address=THERE)  # the first
    assert signins.check_password("user:ann", PASSWORD, address=THERE)


def test_a_lock_at_its_longest_is_not_forgotten_by_waiting_it_out(
    db: Database, signins: SignIns, clock: ManualClock
) -> None:
    signins.set_password("user:ann", PASSWORD, by="user:sam")
    for _ in range(6):
        assert not signins.check_password("user:ann", "a wrong guess!", address=THERE)
    for _ in range(5):  # 60 s, 2, 4, 8 min, then 15
        clock.advance(seconds=900)
        assert not signins.check_password("user:ann", "a wrong guess!", address=THERE)
    clock.advance(seconds=901)  # the lock over, and 15 minutes since the latest wrong one
    assert not signins.check_password("user:ann", "a wrong guess!", address=THERE)
    with pytest.raises(Unauthenticated, match="try again in 15m"):
        signins.check_password("user:ann", PASSWORD, address=THERE)
    clock.advance(seconds=1801)  # quiet for 15 minutes past the lock: forgotten, and deleted
    assert not signins.check_password("user:carol", "a wrong guess!", address=HERE)
    with db.engine.connect() as conn:
        kept = conn.execute(sa.select(signin_failures.c.principal, signin_failures.c.address))
        assert sorted(kept.all()) == [("", HERE), ("user:carol", HERE)]
    assert signins.check_password("user:ann", PASSWORD, address=THERE)


def test_a_name_no_principal_has_counts_against_its_address_only(
    db: Database, signins: SignIns
) -> None:
    for bad in ("nobody", "user:" + "x" * 300, "user:a\x00b"):
        assert not signins.check_password(bad, "a wrong guess!", address=THERE)
    with db.engine.connect() as conn:
        kept = conn.execute(sa.select(signin_failures.c.principal, signin_failures.c.failures))
        assert kept.all() == [("", 3)]


def test_an_ipv6_client_is_counted_by_its_64() -> None:
    assert (
        address_of("2001:db8:1:2::1") == address_of("2001:db8:1:2:ffff::9") == ("2001:db8:1:2::/64")
    )
    assert address_of("203.0.113.9") == "203.0.113.9"
    assert address_of("testclient") == "testclient"


def test_twenty_wrong_passwords_from_one_address_lock_it_for_every_principal(
    signins: SignIns, clock: ManualClock
) -> None:
    people = [f"user:p{n}" for n in range(6)]
    for person in people:
        signins.set_password(person, PASSWORD, by="user:sam")
    for person in people[:5]:  # four each: no principal is locked on its own
        for _ in range(4):
            assert not signins.check_password(person, "a wrong guess!", address=THERE)
    assert not signins.check_password(people[5], "a wrong guess!", address=THERE)  # the 21st
    with pytest.raises(Unauthenticated) as locked:
        signins.check_password(people[5], PASSWORD, address=THERE)
    assert str(locked.value).startswith(
        "too many wrong passwords for any principal from this address: try again in 30s"
    )
    assert signins.check_password(people[5], PASSWORD, address=HERE)
    clock.advance(seconds=30)
    assert signins.check_password(people[5], PASSWORD, address=THERE)


def test_sixty_guesses_at_once_do_not_lock_the_person_out_from_elsewhere(
    signins: SignIns,
) -> None:
    signins.set_password("user:ann", PASSWORD, by="user:sam")
    answers: list[bool | str] = []

    def guess() -> None:
        try:
            answers.append(signins.check_password("user:ann", "a wrong guess!", address=THERE))
        except Unauthenticated as refused:
            answers.append(str(refused))

    threads = [threading.Thread(target=guess) for _ in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 60
    assert True not in answers
    assert any("from this address" in str(answer) for answer in answers)
    assert signins.check_password("user:ann", PASSWORD, address=HERE)


def test_a_password_set_twice_at_once_keeps_one_of_the_two(db: Database, signins: SignIns) -> None:
    errors: list[BaseException] = []
    chosen = [f"{PASSWORD} {n}" for n in range(4)]

    def set_it(password: str) -> None:
        try:
            signins.set_password("user:ann", password, by="user:sam")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=set_it, args=(each,)) for each in chosen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(passwords)).scalar_one() == 1
    assert [signins.check_password("user:ann", each) for each in chosen].count(True) == 1


def test_the_clients_verbs_sign_in_and_out_and_the_policies_guard_links(
    desk: Client, clock: ManualClock
) -> None:
    info, code = desk.sessions.link("user:ann")
    assert (info.principal, info.created_by) == ("user:ann", "user:sam")
    principal, token = desk.sessions.sign_in_with_link(code)
    assert principal == "user:ann"
    assert desk.sessions.principal(token) == "user:ann"
    with pytest.raises(Unauthenticated, match="was used already"):
        desk.sessions.sign_in_with_link(code)
    desk.sessions.sign_out(token)
    with pytest.raises(Unauthenticated, match="signed out"):
        desk.sessions.principal(token)

    hour, _ = desk.sessions.link("user:carol", expires_in=timedelta(hours=1))
    assert hour.expires_at == clock.now() + timedelta(hours=1)

    desk.sessions.set_password("user:ann", PASSWORD)
    assert desk.sessions.sign_in_with_password("user:ann", PASSWORD)[0] == "user:ann"
    for principal, password in [("user:ann", "wrong password!"), ("user:nobody", PASSWORD)]:
        with pytest.raises(Unauthenticated) as refused:
            desk.sessions.sign_in_with_password(principal, password)
        assert str(refused.value).startswith("that principal and password do not match")

    with pytest.raises(PolicyDenied, match='user:ann may not manage_tokens App::"acme"'):
        desk.sessions.link("user:ann", by="user:ann")
    with pytest.raises(PolicyDenied, match="user:carol may not manage_tokens"):
        desk.sessions.set_password("user:carol", PASSWORD, by="user:carol")
    with desk.db.engine.connect() as conn:
        refused_rows = conn.execute(sa.select(denials.c.principal, denials.c.context)).all()
        links = conn.execute(sa.select(sa.func.count()).select_from(login_links)).scalar()
    assert sorted((row.principal, row.context["verb"]) for row in refused_rows) == [
        ("user:ann", "login_link"),
        ("user:carol", "password"),
    ]
    assert links == 2
