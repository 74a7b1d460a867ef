"""The wakeup service in one process, on SQLite and on Postgres: its routes (through Starlette's
test client) and its loop calling a real local HTTP server."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit.core.wakeup_tokens import mint_instance_token
from remit.wakeup.api import wakeup_api
from remit.wakeup.loop import WakeLoop
from remit.wakeup.store import WakeupStore, accounts, instances
from tests.wakeup_support import Instances, wait_until


@dataclass
class Service:
    store: WakeupStore
    http: TestClient
    pokes: list[int]
    account: str  # an account token
    other: str  # another account's token

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.account}"}

    def register(self, url: str, token: str, account: str | None = None) -> Any:
        return self.http.post(
            "/wakeup/instances", json={"url": url, "token": token}, headers=self.auth(account)
        )

    def wake(self, token: str, at: datetime | str) -> Any:
        shown = at if isinstance(at, str) else at.isoformat()
        return self.http.put("/wakeup/wake", json={"at": shown}, headers=self.auth(token))

    def show(self, instance_id: str, account: str | None = None) -> Any:
        return self.http.get(f"/wakeup/instances/{instance_id}", headers=self.auth(account))


@pytest.fixture
def store(empty_database_url: str) -> Iterator[WakeupStore]:
    made = WakeupStore(empty_database_url)
    yield made
    made.dispose()


def _service(store: WakeupStore, poke: Any, *, allow_private: bool) -> Iterator[Service]:
    pokes: list[int] = []

    def poked() -> None:
        pokes.append(1)
        poke()

    api = wakeup_api(store, poke=poked, allow_private=allow_private)
    with TestClient(api, raise_server_exceptions=False) as http:
        yield Service(
            store=store,
            http=http,
            pokes=pokes,
            account=store.create_account("acme"),
            other=store.create_account("globex"),
        )


@pytest.fixture
def service(store: WakeupStore) -> Iterator[Service]:
    """The routes with the address check on, and no loop."""
    yield from _service(store, lambda: None, allow_private=False)


@pytest.fixture
def instances_server() -> Iterator[Instances]:
    server = Instances()
    yield server
    server.close()


@pytest.fixture
def looping(store: WakeupStore) -> Iterator[tuple[Service, WakeLoop]]:
    """The routes and a running loop, calling private addresses (the local test server), with
    a two-second lease."""
    loop = WakeLoop(store, allow_private=True, lease=2.0, drain=5.0)
    loop.start()
    try:
        for made in _service(store, loop.poke, allow_private=True):
            yield made, loop
    finally:
        loop.stop()


PUBLIC = "http://93.184.215.14/acme"
NOW_ISH = datetime(2030, 1, 31, 9, 0, tzinfo=UTC)


# Routes.


def test_health_answers_ok(service: Service) -> None:
    answer = service.http.get("/health")
    assert (answer.status_code, answer.json()) == (200, {"ok": True})


def test_an_instance_is_registered_once_and_again_idempotently(service: Service) -> None:
    token = mint_instance_token()
    first = service.register(PUBLIC + "/", token)
    assert first.status_code == 201
    again = service.register(PUBLIC, token)
    assert (again.status_code, again.json()) == (200, first.json())
    shown = service.show(first.json()["id"])
    assert shown.status_code == 200
    assert shown.json() == {
        "id": first.json()["id"],
        "url": PUBLIC,
        "at": None,
        "called_at": None,
        "attempts": 0,
        "last_error": None,
    }


def test_an_instance_token_another_account_registered_is_refused(service: Service) -> None:
    token = mint_instance_token()
    assert service.register(PUBLIC, token).status_code == 201
    taken = service.register(PUBLIC, token, account=service.other)
    assert taken.status_code == 409
    assert "another account" in taken.json()["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"url": PUBLIC, "token": "rwa_not-an-instance-token"}, "starts rwi_"),
        ({"url": PUBLIC}, "starts rwi_"),
        ({"url": "ftp://93.184.215.14/", "token": "rwi_x"}, "http or https"),
        ({"url": "http://93.184.215.14/?a=1", "token": "rwi_x"}, "has a query"),
        ({"url": "http://user:pw@93.184.215.14/", "token": "rwi_x"}, "user or password"),
        ({"url": "http://127.0.0.1:8700", "token": "rwi_x"}, "loopback"),
        ({"url": "http://localhost/", "token": "rwi_x"}, "loopback"),
        ({"url": "http://169.254.169.254/", "token": "rwi_x"}, "cloud metadata"),
        ({"url": "http://0177.0.0.1/", "token": "rwi_x"}, "loopback"),
        ({"url": "http://[::ffff:10.0.0.1]/", "token": "rwi_x"}, "private"),
        ({"url": None, "token": "rwi_x"}, "http or https"),
    ],
)
def test_a_bad_registration_is_refused_naming_the_rule(
    service: Service, body: dict[str, Any], says: str
) -> None:
    answer = service.http.post("/wakeup/instances", json=body, headers=service.auth())
    assert answer.status_code == 400
    assert says in answer.json()["error"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer rwa_unknown"},
        {"Authorization": "Basic rwa_x"},
        {"Authorization": "Bearer rwi_an-instance-token"},
    ],
)
def test_registering_needs_a_known_account_token(service: Service, headers: dict[str, str]) -> None:
    body = {"url": PUBLIC, "token": mint_instance_token()}
    answer = service.http.post("/wakeup/instances", json=body, headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error"]
    for route in ("get", "delete"):
        other = getattr(service.http, route)("/wakeup/instances/x", headers=headers)
        assert other.status_code == 401
        assert other.json()["error"]


def test_a_new_url_forgets_the_wake_and_the_same_url_keeps_it(service: Service) -> None:
    token = mint_instance_token()
    instance_id = service.register(PUBLIC, token).json()["id"]
    assert service.wake(token, "2030-01-31T10:00:00+01:00").status_code == 204
    assert service.show(instance_id).json()["at"] == "2030-01-31T09:00:00Z"
    assert service.register(PUBLIC, token).status_code == 200
    assert service.show(instance_id).json()["at"] == "2030-01-31T09:00:00Z"
    assert service.register("https://93.184.215.14/moved", token).status_code == 200
    shown = service.show(instance_id).json()
    assert (shown["url"], shown["at"]) == ("https://93.184.215.14/moved", None)


def test_another_accounts_instance_is_forbidden_and_an_unknown_one_not_found(
    service: Service,
) -> None:
    instance_id = service.register(PUBLIC, mint_instance_token()).json()["id"]
    for method in ("get", "delete"):
        theirs = getattr(service.http, method)(
            f"/wakeup/instances/{instance_id}", headers=service.auth(service.other)
        )
        assert theirs.status_code == 403
        assert "another account" in theirs.json()["error"]
        unknown = getattr(service.http, method)(
            "/wakeup/instances/00000000-0000-0000-0000-000000000000", headers=service.auth()
        )
        assert (unknown.status_code, unknown.json()) == (404, {"error": "no instance has this id"})
    assert service.show(instance_id).status_code == 200


def test_an_instance_is_deleted(service: Service) -> None:
    token = mint_instance_token()
    instance_id = service.register(PUBLIC, token).json()["id"]
    gone = service.http.delete(f"/wakeup/instances/{instance_id}", headers=service.auth())
    assert (gone.status_code, gone.content) == (204, b"")
    assert service.show(instance_id).status_code == 404
    assert service.wake(token, NOW_ISH).status_code == 401
    # Its token is free again, for any account.
    assert service.register(PUBLIC, token, account=service.other).status_code == 201


def test_setting_a_wake_replaces_the_one_before_and_pokes_the_loop(service: Service) -> None:
    token = mint_instance_token()
    instance_id = service.register(PUBLIC, token).json()["id"]
    assert service.wake(token, NOW_ISH).status_code == 204
    later = service.wake(token, "2030-02-01T00:00:00Z")
    assert (later.status_code, later.content) == (204, b"")
    assert service.show(instance_id).json()["at"] == "2030-02-01T00:00:00Z"
    assert len(service.pokes) == 2


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("rwi_unknown", 401), ("rwa_an-account-token", 401)],
)
def test_setting_a_wake_needs_a_registered_instance_token(
    service: Service, token: str | None, status: int
) -> None:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    answer = service.http.put("/wakeup/wake", json={"at": NOW_ISH.isoformat()}, headers=headers)
    assert answer.status_code == status
    assert answer.json()["error"]
    assert service.pokes == []


@pytest.mark.parametrize(
    "at",
    ["2030-01-31T09:00:00", "tomorrow", "2030-01-31", "2030-13-01T00:00:00Z", 1893456000, None],
)
def test_a_wake_at_a_bad_time_is_refused(service: Service, at: object) -> None:
    token = mint_instance_token()
    service.register(PUBLIC, token)
    answer = service.http.put("/wakeup/wake", json={"at": at}, headers=service.auth(token))
    assert answer.status_code == 400
    assert "ISO 8601" in answer.json()["error"]


def test_bad_bodies_paths_and_methods_are_answered_in_json(service: Service) -> None:
    token = mint_instance_token()
    service.register(PUBLIC, token)
    not_json = service.http.put("/wakeup/wake", content=b"{not json", headers=service.auth(token))
    assert (not_json.status_code, not_json.json()["error"]) == (
        400,
        "the request body must be a JSON object",
    )
    a_list = service.http.put("/wakeup/wake", json=[1], headers=service.auth(token))
    assert a_list.status_code == 400
    too_large = service.http.put(
        "/wakeup/wake", json={"at": "x" * 20_000}, headers=service.auth(token)
    )
    assert too_large.status_code == 413
    assert "over 16384 bytes" in too_large.json()["error"]
    unknown = service.http.get("/nowhere")
    assert (unknown.status_code, unknown.json()) == (404, {"error": "no such path"})
    wrong = service.http.post("/wakeup/wake", json={})
    assert (wrong.status_code, wrong.json()) == (405, {"error": "POST is not taken here"})
    assert service.http.put("/health").status_code == 405


def test_tokens_are_stored_only_as_their_sha256(service: Service) -> None:
    token = mint_instance_token()
    service.register(PUBLIC, token)
    with service.store.db.engine.connect() as conn:
        stored = [
            *conn.execute(sa.select(accounts)).all(),
            *conn.execute(sa.select(instances)).all(),
        ]
    text = repr(stored)
    for secret in (service.account, service.other, token):
        assert secret not in text
        assert secret.split("_", 1)[1][:12] not in text
        assert hashlib.sha256(secret.encode()).hexdigest() in text


# The loop, calling a real local HTTP server.


def _now() -> datetime:
    return datetime.now(UTC)


def _registered(service: Service, server: Instances, path: str) -> tuple[str, str]:
    token = mint_instance_token()
    answer = service.register(server.url + path, token)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"], token


def test_a_due_wake_is_called_once(
    looping: tuple[Service, WakeLoop], instances_server: Instances
) -> None:
    service, _ = looping
    first_id, first = _registered(service, instances_server, "/i/1")
    second_id, second = _registered(service, instances_server, "/i/2")
    assert service.wake(first, _now()).status_code == 204
    instances_server.wait_calls("/i/1", 1)
    wait_until(lambda: service.show(first_id).json()["called_at"], "the call to be recorded")
    # Once a wake due later has been called too, the first has had every chance to repeat.
    assert service.wake(second, _now() + timedelta(seconds=1)).status_code == 204
    instances_server.wait_calls("/i/2", 1)
    wait_until(lambda: service.show(second_id).json()["called_at"], "the second call recorded")
    assert instances_server.count("/i/1") == 1
    shown = service.show(first_id).json()
    assert (shown["attempts"], shown["last_error"]) == (0, None)


@pytest.mark.parametrize("status", [500, 302])
def test_a_failing_instance_is_retried_with_backoff(
    looping: tuple[Service, WakeLoop], instances_server: Instances, status: int
) -> None:
    """A 5xx is a failure, and so is a redirect, which is not followed."""
    service, _ = looping
    instance_id, token = _registered(service, instances_server, "/i/1")
    instances_server.status["/i/1"] = status
    assert service.wake(token, _now()).status_code == 204
    instances_server.wait_calls("/i/1", 3)
    shown = wait_until(
        lambda: (s := service.show(instance_id).json())["attempts"] >= 3 and s,
        "three failures to be recorded",
    )
    assert shown["last_error"] == f"it answered {status}"
    assert shown["called_at"] is None
    first, second, third = instances_server.times("/i/1")[:3]
    # Tried again after 1 s, then 2 s, each give or take a fifth.
    assert second - first >= 0.8 * 1
    assert third - second >= 0.8 * 2
    instances_server.status["/i/1"] = 200
    shown = wait_until(
        lambda: (s := service.show(instance_id).json())["called_at"] and s,
        "the instance to answer",
        timeout=90,
    )
    assert (shown["attempts"], shown["last_error"]) == (0, None)
    assert {path for path, _ in instances_server.calls} == {"/i/1/wake"}


def test_an_outcome_is_not_recorded_on_a_wake_replaced_during_its_call(
    looping: tuple[Service, WakeLoop], instances_server: Instances
) -> None:
    service, _ = looping
    instance_id, token = _registered(service, instances_server, "/i/1")
    instances_server.hold("/i/1")
    assert service.wake(token, _now()).status_code == 204
    instances_server.wait_calls("/i/1", 1)
    new_at = _now() + timedelta(seconds=1)
    assert service.wake(token, new_at).status_code == 204
    instances_server.release("/i/1")
    instances_server.wait_calls("/i/1", 2)
    shown = wait_until(
        lambda: (s := service.show(instance_id).json())["called_at"] and s,
        "the new wake to be recorded",
    )
    assert shown["at"] == new_at.isoformat().replace("+00:00", "Z")
    assert instances_server.times("/i/1")[1] >= new_at.timestamp()


def test_a_wake_in_the_future_is_not_called_early(
    looping: tuple[Service, WakeLoop], instances_server: Instances
) -> None:
    service, _ = looping
    later_id, later = _registered(service, instances_server, "/i/later")
    _, now = _registered(service, instances_server, "/i/now")
    at = _now() + timedelta(seconds=3)
    assert service.wake(later, at).status_code == 204
    assert service.wake(now, _now()).status_code == 204
    instances_server.wait_calls("/i/now", 1)
    assert instances_server.count("/i/later") == 0
    assert service.show(later_id).json()["called_at"] is None
    instances_server.wait_calls("/i/later", 1)
    assert instances_server.times("/i/later")[0] >= at.timestamp()


def test_a_call_cut_off_by_a_stop_is_not_recorded(
    store: WakeupStore, instances_server: Instances
) -> None:
    loop = WakeLoop(store, allow_private=True, lease=60.0, drain=0.2)
    loop.start()
    stopped = False
    try:
        for service in _service(store, loop.poke, allow_private=True):
            instance_id, token = _registered(service, instances_server, "/i/1")
            instances_server.hold("/i/1")
            assert service.wake(token, _now()).status_code == 204
            instances_server.wait_calls("/i/1", 1)
            loop.stop()
            stopped = True
            instances_server.release("/i/1")
            shown = service.show(instance_id).json()
            assert (shown["called_at"], shown["attempts"]) == (None, 0)
            with store.db.engine.connect() as conn:
                leased = conn.execute(sa.select(instances.c.next_attempt_at)).scalar_one()
            assert leased > _now() + timedelta(seconds=30)  # called again when the lease lapses
    finally:
        if not stopped:
            loop.stop()


def test_no_token_reaches_the_log(
    looping: tuple[Service, WakeLoop],
    instances_server: Instances,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service, _ = looping
    caplog.set_level(logging.DEBUG)
    instance_id, token = _registered(service, instances_server, "/i/1")
    instances_server.status["/i/1"] = 500
    assert service.wake(token, _now()).status_code == 204
    wait_until(lambda: service.show(instance_id).json()["attempts"] >= 1, "a failed call")
    instances_server.status["/i/1"] = 200
    wait_until(lambda: service.show(instance_id).json()["called_at"], "a call", timeout=90)
    service.register(server_url := instances_server.url + "/i/2", mint_instance_token())
    service.http.put("/wakeup/wake", json={"at": "bad"}, headers=service.auth(token))
    logged = caplog.text + repr([r.args for r in caplog.records])
    assert "/i/1/wake" in logged  # the log was captured
    assert server_url
    for secret in (token, service.account, service.other):
        assert secret not in logged
        assert secret[4:16] not in logged


def test_a_wake_failing_for_days_backs_off_at_the_cap(store: WakeupStore) -> None:
    """Thousands of failures in a row (an instance down for days) wait the five-minute cap,
    no more and with no arithmetic overflow."""
    account = store.account_of(store.create_account("long")) or ""
    token = mint_instance_token()
    instance_id, _ = store.register(account, "http://192.0.2.1", token)
    now = _now()
    assert store.set_wake(token, now)
    (due,) = store.claim(now, 30.0, 10)
    assert store.failed(replace(due, attempts=5000), now, "it answered 503")
    shown = store.instance(instance_id)
    assert shown is not None
    assert shown.shown()["last_error"] == "it answered 503"
    assert store.claim(now + timedelta(seconds=239), 30.0, 10) == []  # 300 s, less a fifth
    (later,) = store.claim(now + timedelta(seconds=361), 30.0, 10)
    assert later.id == instance_id
    assert store.claim(now + timedelta(seconds=361), 30.0, 10) == []
