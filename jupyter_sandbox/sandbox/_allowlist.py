"""An allow-list of destinations (``network=["pypi.org", "api.example.com:443", "10.0.0.0/8"]``),
parsed and checked before anything runs.

Each entry is a DNS name (matched exactly: no subdomains, no wildcard), an IP address or a
network in CIDR form, with an optional ``:port`` (``[v6]:port`` for an IPv6 address); without
one, ports 443 and 80. Names are resolved by the proxy on the host side (`_egress`), never in
the sandbox. What can never be a destination is refused here, in one line that says what to
do: a network as wide as the whole internet (that is ``network="bridge"``), loopback,
link-local (cloud metadata at 169.254.169.254), multicast or unspecified addresses, and an
address written as a name (``0x7f000001``: the proxy reads it as the address, never the name).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from .._shared._errors import SandboxConfigError

DEFAULT_PORTS = (443, 80)
ENTRIES_CEILING = 256
"""Destinations one sandbox may list: a proxy rule each; more is a mistake, not a policy."""
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_WIDEST = {4: 8, 6: 16}
"""Shortest prefix allowed per IP version: wider is (nearly) the whole internet."""


@dataclass(frozen=True)
class Destination:
    """One allowed host (a lower-case DNS name) or network (CIDR text), on ``ports``."""

    host: str
    ports: tuple[int, ...] = DEFAULT_PORTS

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        """The network of an address entry; None for a name."""
        try:
            return ipaddress.ip_network(self.host)
        except ValueError:
            return None

    def __str__(self) -> str:
        if self.ports == DEFAULT_PORTS:
            return self.host
        host = f"[{self.host}]" if ":" in self.host else self.host
        return ",".join(f"{host}:{port}" for port in self.ports)


def _fail(entry: str, why: str) -> SandboxConfigError:
    return SandboxConfigError(f"network entry {entry!r} {why}", parameter="network")


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise _fail(entry, f"has port {text!r}: a port is a number from 1 to 65535")
    return int(text)


def _split(entry: str) -> tuple[str, tuple[int, ...]]:
    """``(host, ports)`` of ``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 network."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise _fail(entry, "is not [IPv6]:port: write e.g. [2001:db8::1]:443")
        return host, (_port(entry, rest[1:]),) if rest else DEFAULT_PORTS
    if entry.count(":") > 1:  # a bare IPv6 address or network: no port
        return entry, DEFAULT_PORTS
    host, colon, port = entry.partition(":")
    return host, (_port(entry, port),) if colon else DEFAULT_PORTS


def _address(entry: str, host: str) -> str | None:
    """The canonical network text of an address entry; None for a name."""
    try:
        net = ipaddress.ip_network(host, strict=True)
    except ValueError as exc:
        if "/" in host or ":" in host or re.fullmatch(r"[0-9.]+", host):
            raise _fail(entry, f"is not an IP network ({exc}): write e.g. 10.0.0.0/8") from None
        return None
    if net.prefixlen < _WIDEST[net.version]:
        raise _fail(
            entry,
            f"spans /{net.prefixlen}, nearly the whole internet: list the hosts the code needs"
            " (or use network='bridge' for an open network)",
        )
    for special in ("loopback", "link_local", "multicast", "unspecified", "reserved"):
        if getattr(net, f"is_{special}") or _overlaps_special(net, special):
            what = special.replace("_", "-")
            raise _fail(
                entry,
                f"is {what}: a sandbox never reaches the host's own or metadata"
                " addresses; list the servers the code needs",
            )
    return str(net)


def _overlaps_special(net: ipaddress.IPv4Network | ipaddress.IPv6Network, special: str) -> bool:
    """Whether a wide ``net`` contains a special range (``10.0.0.0/8`` contains none; a /8 of
    127 or 169.254.0.0/15 does)."""
    ranges = {
        4: {"loopback": "127.0.0.0/8", "link_local": "169.254.0.0/16", "unspecified": "0.0.0.0/8"},
        6: {"loopback": "::1/128", "link_local": "fe80::/10"},
    }[net.version]
    other = ranges.get(special)
    return other is not None and net.overlaps(ipaddress.ip_network(other))


def _name(entry: str, host: str) -> str:
    name = host.lower().removesuffix(".")
    if not name.isascii():
        raise _fail(entry, "is not ASCII: write the name in its xn-- (punycode) form")
    if "*" in name or name.startswith("."):
        raise _fail(entry, "has a wildcard: names match exactly; list each host the code needs")
    numeric = _numeric(name)
    if numeric is not None:
        raise _fail(entry, f"is the IP address {numeric} written another way: write {numeric}")
    if len(name) > 253 or not _NAME.match(name):
        raise _fail(
            entry,
            "is not a host name, host:port or IP network: write e.g. pypi.org,"
            " api.example.com:443 or 10.0.0.0/8",
        )
    if name == "localhost" or name.endswith(".localhost"):
        raise _fail(entry, "is the host itself: a sandbox never reaches the host's own addresses")
    return name


def _numeric(name: str) -> str | None:
    """The dotted quad of a name that is an IPv4 address in another notation (``0x7f000001``,
    ``0xa.1``): the proxy reads such a host as that address, never as the name listed."""
    try:
        return str(ipaddress.IPv4Address(socket.inet_aton(name)))
    except OSError:
        return None


def allow_list(entries: object) -> tuple[Destination, ...]:
    """The checked, merged, sorted destinations of ``entries`` (strings; a comma-separated
    string is split). `SandboxConfigError` naming the first bad entry and what to write."""
    if isinstance(entries, str):
        entries = [e for e in entries.split(",")]
    if not isinstance(entries, Iterable) or isinstance(entries, (bytes, dict)):
        raise SandboxConfigError(
            f"network must be 'none', 'bridge' or a list of hosts, not {entries!r}",
            parameter="network",
        )
    ports: dict[str, set[int]] = {}
    for raw in entries:
        if not isinstance(raw, str):
            raise SandboxConfigError(
                f"network entries are strings like 'pypi.org:443', not {raw!r}", parameter="network"
            )
        entry = raw.strip()
        if not entry:
            raise _fail(raw, "is empty: write e.g. pypi.org, api.example.com:443 or 10.0.0.0/8")
        host, given = _split(entry)
        key = _address(entry, host) or _name(entry, host)
        ports.setdefault(key, set()).update(given)
    if not ports:
        raise SandboxConfigError(
            "network is an empty allow-list: name the hosts the code needs, or use network='none'",
            parameter="network",
        )
    if len(ports) > ENTRIES_CEILING:
        raise SandboxConfigError(
            f"network lists {len(ports)} destinations; at most {ENTRIES_CEILING}: "
            "use a CIDR network",
            parameter="network",
        )
    return tuple(
        Destination(host, DEFAULT_PORTS if set(p) == set(DEFAULT_PORTS) else tuple(sorted(p)))
        for host, p in sorted(ports.items())
    )


def describe(destinations: Iterable[Destination]) -> str:
    """``pypi.org, api.example.com:443``: what a record or an error shows."""
    return ", ".join(str(d) for d in destinations)


def require_docker(engine: str, url: str) -> None:
    """Refuse an allow-list on an engine other than Docker (``engine`` is `_engine.Engine`'s
    name): Podman's networks cannot keep the host off the proxy's network."""
    if engine != "docker":
        raise SandboxConfigError(
            f"an allow-listed network needs Docker: Podman at {url} cannot keep the host"
            " off a sandbox's network (choose Docker: JUPYTER_SANDBOX_ENGINE=docker)",
            parameter="network",
        )
