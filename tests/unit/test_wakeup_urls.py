"""The instance URLs the wakeup service takes, and the addresses it refuses to call."""

from __future__ import annotations

import pytest

from remit.wakeup.urls import UrlRefused, instance_url, literal_address, target

REFUSED = [
    "http://127.0.0.1/",
    "http://127.0.0.2:8080",
    "http://localhost/",
    "http://LOCALHOST:9000/x",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data",
    "http://169.254.170.2/",
    "http://168.63.129.16/",
    "http://100.100.100.200/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://192.0.0.192/",
    "http://198.18.0.1/",
    "http://[fd00:ec2::254]/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://[fec0::1]/",
    "http://[ff02::1]/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f000001/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://017700000001/",
    "http://3232235777/",  # 192.168.1.1
    "https://169.254.169.254/",
]

ACCEPTED = [
    "http://93.184.215.14/",
    "https://93.184.215.14:8443/app",
    "http://1.1.1.1",
    "http://8.8.8.8/a/b/",
    "http://[2606:4700:4700::1111]/",
    "https://[2001:4860:4860::8888]:443/x",
    "http://1572395790/",  # 93.184.215.14 in decimal
    "http://[::ffff:93.184.215.14]/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_an_address_that_is_not_public_is_refused(url: str) -> None:
    stored = instance_url(url)
    with pytest.raises(UrlRefused, match="calls only public addresses") as refused:
        target(stored)
    assert stored in str(refused.value)


@pytest.mark.parametrize("url", REFUSED)
def test_allow_private_lifts_the_address_check(url: str) -> None:
    assert target(instance_url(url), allow_private=True).address is None


@pytest.mark.parametrize("url", ACCEPTED)
def test_a_public_address_is_called_at_that_address(url: str) -> None:
    stored = instance_url(url)
    found = target(stored)
    assert found.address is not None
    assert found.address.is_global
    assert found.url == stored


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://93.184.215.14/", "it is ftp"),
        ("93.184.215.14/wake", "without a scheme"),
        ("file:///etc/passwd", "it is file"),
        ("http:///nohost", "names no host"),
        ("http://user@93.184.215.14/", "user or password"),
        ("http://user:pw@93.184.215.14/", "user or password"),
        ("http://93.184.215.14/?a=1", "has a query"),
        ("http://93.184.215.14/?", "has a query"),
        ("http://93.184.215.14/#top", "has a fragment"),
        ("http://93.184.215.14/a b", "space or control"),
        ("http://93.184.215.14:0/", "port 0"),
        ("http://93.184.215.14:99999/", "Port out of range"),
        ("", "url must be"),
    ],
)
def test_a_url_of_the_wrong_shape_is_refused_naming_the_rule(url: str, why: str) -> None:
    with pytest.raises(UrlRefused, match="http or https URL") as refused:
        instance_url(url)
    assert why in str(refused.value)


@pytest.mark.parametrize("value", [None, 42, ["http://1.1.1.1"], "x" * 2001])
def test_a_url_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(UrlRefused, match="http or https URL"):
        instance_url(value)


def test_allow_private_keeps_the_shape_rules() -> None:
    with pytest.raises(UrlRefused, match="has a query"):
        target(instance_url("http://127.0.0.1/?x=1"), allow_private=True)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("http://93.184.215.14/", "http://93.184.215.14"),
        ("https://93.184.215.14/app/", "https://93.184.215.14/app"),
        ("https://93.184.215.14/app//", "https://93.184.215.14/app"),
        ("http://93.184.215.14:8080", "http://93.184.215.14:8080"),
    ],
)
def test_a_url_is_stored_without_a_trailing_slash(given: str, stored: str) -> None:
    assert instance_url(given) == stored


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("example.com", None),
        ("1.2.3.4.5", None),
    ],
)
def test_every_way_of_writing_an_address_is_read_as_that_address(
    host: str, address: str | None
) -> None:
    found = literal_address(host)
    assert (None if found is None else str(found)) == address


def test_the_checked_address_is_the_one_connected_to() -> None:
    found = target("https://93.184.215.14:8443/app")
    assert str(found.address) == "93.184.215.14"
    assert found.host == "93.184.215.14"
