"""The instance URLs the wakeup service calls, and the addresses it refuses to call.

An instance URL is `http` or `https`, with no user or password, no query and no fragment; it is
stored without a trailing slash and `/wake` is added to it. Whoever holds an account token
chooses the URL, so the service must not become a way to reach what only it can reach: an
address that resolves to a loopback, private, link-local, unspecified, multicast, reserved or
shared (CGNAT, 100.64.0.0/10) address, or to a cloud's metadata service, is refused, at
registration and again at each call. IPv4 written in decimal, octal or hex (`2130706433`,
`0177.0.0.1`, `0x7f000001`, `127.1`) is read as the address it names, and an IPv6 address that
carries an IPv4 one (`::ffff:127.0.0.1`, 6to4, NAT64, Teredo) is judged by the IPv4 one too.

A name is resolved once, every address it resolves to is checked, and the call connects to a
checked address (`Target`): a name that resolves to a public address when checked and a private
one when connected (DNS rebinding) cannot pass.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from remit.core.errors import RemitError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services, refused by name whatever ranges they fall in.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "168.63.129.16",  # Azure's wire server (a public address)
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
# Ranges that are not public, by their name, beyond what `ipaddress` names itself.
_NAMED: tuple[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network], ...] = (
    ("shared (CGNAT)", ipaddress.ip_network("100.64.0.0/10")),
    ("reserved for IETF protocols", ipaddress.ip_network("192.0.0.0/24")),
    ("reserved for benchmarks", ipaddress.ip_network("198.18.0.0/15")),
)
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


class UrlRefused(RemitError):
    """An instance URL the service will not call: its shape, or the address it names."""


@dataclass(frozen=True)
class Target:
    """Where one call goes: the URL as registered, and the checked address to connect to."""

    url: str
    host: str
    address: IPAddress | None  # None: the address check was lifted (`--allow-private`)


def instance_url(value: object) -> str:
    """`value` as an instance URL is stored (no trailing slash), or `UrlRefused` naming the
    rule it breaks. Checks the shape only; `check_address` checks where it leads."""
    rule = "url must be an http or https URL with no user, password, query or fragment"
    if not isinstance(value, str) or not value or len(value) > 2000:
        raise UrlRefused(rule)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as error:
        raise UrlRefused(f"{rule}: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise UrlRefused(f"{rule}: it is {parts.scheme or 'without a scheme'}")
    if not parts.hostname:
        raise UrlRefused(f"{rule}: it names no host")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused(f"{rule}: it has a user or password")
    if parts.query or "?" in value:
        raise UrlRefused(f"{rule}: it has a query")
    if parts.fragment or "#" in value:
        raise UrlRefused(f"{rule}: it has a fragment")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise UrlRefused(f"{rule}: it has a space or control character")
    if port == 0:
        raise UrlRefused(f"{rule}: port 0 cannot be called")
    return value.rstrip("/")


def refusal(address: IPAddress) -> str | None:
    """Why the service will not call `address`, or None for a public one."""
    if address in METADATA:
        return "a cloud metadata service"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            # An IPv4 address written as IPv6: the IPv4 address is the one connected to.
            mapped = refusal(address.ipv4_mapped)
            return None if mapped is None else f"{mapped}, written as IPv6"
        carried = _carried_ipv4(address)
        if carried is not None:
            why = refusal(carried)
            if why is not None:
                return f"{why}, carried in IPv6"
    for name, network in _NAMED:
        if address.version == network.version and address in network:
            return name
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("not public", not address.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def literal_address(host: str) -> IPAddress | None:
    """The address `host` writes out (IPv6 in brackets or not, IPv4 in any form `inet_aton`
    reads: decimal, octal, hex, shortened), or None for a name."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0] if ":" in bare else bare)
    except ValueError:
        pass
    if ":" in bare:
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def target(url: str, *, allow_private: bool = False) -> Target:
    """Resolve the host of a stored instance URL once and check every address it resolves to;
    the address to connect to, or `UrlRefused` naming the address and the rule."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if allow_private:
        return Target(url=url, host=host, address=None)
    addresses = resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    for address in addresses:
        why = refusal(address)
        if why is not None:
            shown = host if str(address) == host else f"{host} ({address})"
            raise UrlRefused(
                f"url {url} leads to {shown}, which is {why}: the wakeup service calls only "
                "public addresses (run it with --allow-private to call others)"
            )
    return Target(url=url, host=host, address=addresses[0])


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (itself, for an address); `UrlRefused` if none."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise UrlRefused(f"the host {host} does not resolve ({error})") from None
    addresses: list[IPAddress] = []
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise UrlRefused(f"the host {host} resolves to no address")
    return addresses


def _carried_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in prefix for prefix in _NAT64) or (
        address in _IPV4_COMPATIBLE and int(address) > 1
    ):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None
