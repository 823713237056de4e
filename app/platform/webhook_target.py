"""Where a webhook may point: the one rule, used at registration and at connect time.

A webhook makes the mesh send requests on the owner's behalf, so an owner must
not be able to aim it at the mesh's own network (SSRF): loopback, private,
link-local (cloud metadata at 169.254.169.254), shared, reserved and multicast
addresses are refused, also when they hide inside IPv4-mapped, NAT64 or 6to4
IPv6 addresses. A name is resolved and *every* address it has is checked; the
worker then connects to an address it checked, so a DNS answer that changes
between the check and the connect (rebinding) cannot reach a refused address.
``MESH_WEBHOOK_ALLOW_PRIVATE=true`` lifts the address rule (local development,
tests); the scheme and URL form rules always hold. See ADR 035.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

URL_MAX_LENGTH = 2048
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(Exception):
    """The URL or an address it resolves to may not be a webhook target; the
    message says which and why (no secret is ever part of it)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed webhook URL: what to connect to, and what to say it is."""

    url: str
    scheme: str
    host: str  # the name (or literal) from the URL, without brackets
    port: int
    path: str  # path and query, what the request line carries

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def url_for(self, address: IPAddress) -> str:
        """The same URL with the host replaced by a checked address."""
        host = f"[{address}]" if address.version == 6 else str(address)
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def parse(url: str) -> Target:
    """A webhook URL's form: http(s), a host, no credentials, no fragment."""
    if len(url) > URL_MAX_LENGTH:
        raise TargetRefused(f"the url is {len(url)} characters; at most {URL_MAX_LENGTH}")
    try:
        parts: SplitResult = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"the url is not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"the url's scheme must be http or https, not "
                            f"'{parts.scheme or '(none)'}'")
    if not parts.hostname:
        raise TargetRefused("the url has no host")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the url must not carry credentials (user:password@); "
                            "verify the webhook-signature header instead")
    if parts.fragment:
        raise TargetRefused("the url must not have a #fragment")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise TargetRefused("the url must not contain spaces or control characters")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url, parts.scheme, parts.hostname,
                  port or (443 if parts.scheme == "https" else 80), path)


def _unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be a webhook target, or None when it may."""
    inner = _unwrap(address)
    if inner.is_loopback:
        return "loopback"
    if inner.is_link_local:
        return "link-local (cloud metadata lives there)"
    if inner.is_multicast:
        return "multicast"
    if inner.is_unspecified:
        return "unspecified"
    if not inner.is_global:
        return "private or reserved"
    return None


def literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (a literal is its own answer)."""
    address = literal(host)
    if address is not None:
        return [address]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"the host '{host}' does not resolve ({exc})") from exc
    seen: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        found = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if found not in seen:
            seen.append(found)
    if not seen:
        raise TargetRefused(f"the host '{host}' has no address")
    return seen


async def checked_addresses(target: Target, *, allow_private: bool) -> list[IPAddress]:
    """The addresses to connect to: all of the host's, each one allowed — or
    TargetRefused naming the first refused one (one bad answer refuses the name,
    so rebinding between answers cannot slip one through)."""
    addresses = await resolve(target.host, target.port)
    if not allow_private:
        for address in addresses:
            why = refusal(address)
            if why is not None:
                shown = target.host if literal(target.host) else f"'{target.host}' → {address}"
                raise TargetRefused(f"the url's host {shown} is a {why} address; webhooks go "
                                    "to public addresses only")
    return addresses


async def check(url: str, *, allow_private: bool) -> Target:
    """The registration check: the URL's form and its current addresses."""
    target = parse(url)
    await checked_addresses(target, allow_private=allow_private)
    return target
