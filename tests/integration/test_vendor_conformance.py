"""The conformance kit on every example vendor: each type's fake, and its driver against the
vendor's local server, pass the same checks (the resource type's, and the database's or the
host's contract where the type claims one)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from remit import secret
from remit.conformance import DatabaseConformance, HostConformance, KitSecrets, ResourceConformance
from remit.connectors.base import Implementation
from tests.vendor_servers import TOKEN, DnsServer, HostingServer, PgcloudServer, serve

sys.path.insert(0, str(Path(__file__).parent.parent.parent / "examples"))

from acme.connectors import dns, hosting, pgcloud

SERVERS = {"DNS": DnsServer, "HOSTING": HostingServer, "PGCLOUD": PgcloudServer}


def served(prefix: str) -> Iterator[Mapping[str, str]]:
    with serve(SERVERS[prefix]().app) as url:
        yield KitSecrets({f"{prefix}_API_URL": url, f"{prefix}_API_TOKEN": TOKEN})


class DnsRecord(ResourceConformance):
    rtype = dns.record
    sample: ClassVar[dict[str, Any]] = {
        "zone": "acme.example",
        "name": "desk",
        "type": "CNAME",
        "content": "a.test",
    }
    change: ClassVar[dict[str, Any]] = {"content": "b.test", "ttl": 60}
    replace_change: ClassVar[dict[str, Any]] = {"name": "desk2"}


class TestDnsRecordOnItsFake(DnsRecord):
    @pytest.fixture
    def implementation(self, tmp_path: Path) -> Implementation:
        return dns.FakeDns(journal=tmp_path / "dns.jsonl")


class TestDnsRecordOnItsDriver(DnsRecord):
    @pytest.fixture
    def environ(self) -> Iterator[Mapping[str, str]]:
        yield from served("DNS")

    @pytest.fixture
    def implementation(self) -> Implementation:
        return dns.DnsDriver()


class Container(HostConformance):
    rtype = hosting.container
    sample: ClassVar[dict[str, Any]] = {
        "name": "desk",
        "image": "ghcr.io/acme/desk:1",
        "secret_env": {"SMTP_PASSWORD": secret("KIT_SMTP_PASSWORD")},
    }
    change: ClassVar[dict[str, Any]] = {
        "image": "ghcr.io/acme/desk:2",
        "env": {"LOG_LEVEL": "debug"},
    }
    replace_change: ClassVar[dict[str, Any]] = {"name": "desk-two"}


class TestContainerOnItsFake(Container):
    @pytest.fixture
    def implementation(self, tmp_path: Path) -> Implementation:
        return hosting.FakeHosting(journal=tmp_path / "hosting.jsonl")


class TestContainerOnItsDriver(Container):
    @pytest.fixture
    def environ(self) -> Iterator[Mapping[str, str]]:
        yield from served("HOSTING")

    @pytest.fixture
    def implementation(self) -> Implementation:
        return hosting.HostingDriver()


class Project(DatabaseConformance):
    rtype = pgcloud.project
    connector = pgcloud.connector
    sample: ClassVar[dict[str, Any]] = {"name": "desk", "region": "eu-west-1"}
    change: ClassVar[dict[str, Any]] = {"size": "large"}
    replace_change: ClassVar[dict[str, Any]] = {"region": "us-east-1"}


class TestProjectOnItsFake(Project):
    @pytest.fixture
    def implementation(self, tmp_path: Path) -> Implementation:
        return pgcloud.FakePgcloud(journal=tmp_path / "pgcloud.jsonl")


class TestProjectOnItsDriver(Project):
    @pytest.fixture
    def environ(self) -> Iterator[Mapping[str, str]]:
        yield from served("PGCLOUD")

    @pytest.fixture
    def implementation(self) -> Implementation:
        return pgcloud.PgcloudDriver()
