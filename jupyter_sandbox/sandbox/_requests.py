"""What an allow-listed run sent out: its proxy's access log, read back as one row per request.

Every request of an allow-listed run goes through its proxy (`_egress`), so Squid's access log
is the one complete account of what left, refused requests included. Squid writes it in
`LOGFORMAT`, ours: one line per request, opened by `TAG`, with the fields this module reads and
nothing else (no headers, no bodies; Squid's default ``strip_query_terms`` drops a query string
before the line is written, so it never reaches the engine's log files either).

A proxy serves every run of its allow-list, so a run's rows are the lines from its own
container's address (`address_of`, asked once the container runs), made while it ran. Rows are
untrusted text the code chose (a host, a path): each field is parsed strictly, a line that does
not parse is dropped, and every secret value the run was given is masked in what is kept. A
run keeps at most `REQUESTS_KEPT` rows and counts the rest (`RequestLog`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._shared._secrets import MASK, mask
from ..records import RequestLogRecord, RequestRow
from ._allowlist import Destination

if TYPE_CHECKING:
    from docker import DockerClient

TAG = "jsbx-request"
"""The first word of each line in our format: a line without it is another of Squid's."""
LOGFORMAT = f"logformat jsbx {TAG} %tS %>a %rm %>rs %>rd %>rP %Ss %>Hs %>st %<st %err_code %ru"
"""Squid's line per request: its start (epoch seconds), the client's address, the method, the
URL's scheme, host and port, Squid's result, the HTTP status sent back, bytes received from and
sent to the client, Squid's error page (``ERR_ACCESS_DENIED``: refused by a rule) and the URL
(``%ru``: the one field Squid strips the query from, so a query never reaches a log file)."""
REQUESTS_KEPT = 200
"""Rows a run's record keeps (the first ones); the rest are counted."""
REFUSALS_KEPT = 20
"""Refused destinations a record names (each once, with why)."""
_LINE = re.compile(
    rf"^{TAG} (?P<time>\d+(?:\.\d+)?) (?P<address>[0-9a-fA-F.:]+) (?P<method>[A-Za-z_-]{{1,24}})"
    r" (?P<scheme>\S+) (?P<host>\S+) (?P<port>\d+|-) (?P<result>[A-Z_]+(?:/[A-Z_]+)*)"
    r" (?P<status>\d+|-) (?P<sent>\d+|-) (?P<received>\d+|-) (?P<error>\S+) (?P<url>\S*)$"
)
_ERRORS = {
    "ERR_DNS_FAIL": "its name did not resolve",
    "ERR_CONNECT_FAIL": "could not connect (the address may not be reachable from a sandbox)",
    "ERR_READ_TIMEOUT": "timed out",
    "ERR_CONNECT_TIMEOUT": "timed out connecting",
    "ERR_INVALID_REQ": "not a request the proxy reads",
    "ERR_INVALID_URL": "not a URL the proxy reads",
}
"""Squid's error pages for an allowed request that still failed, in words."""


@dataclass(frozen=True)
class Request:
    """One request a run made, as its proxy logged it (host and path masked)."""

    time: float
    address: str
    method: str
    host: str
    port: int
    path: str
    status: int
    sent: int
    received: int
    allowed: bool
    why: str | None
    """Why it was refused, or why an allowed one failed at the proxy; None: it went out."""

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def to_record(self) -> RequestRow:
        return {
            "time": round(self.time, 3),
            "method": self.method,
            "host": self.host,
            "port": self.port,
            "path": self.path,
            "status": self.status,
            "sent": self.sent,
            "received": self.received,
            "allowed": self.allowed,
            "why": self.why,
        }


def parse(
    logs: str, destinations: tuple[Destination, ...], secrets: tuple[str, ...] = ()
) -> list[Request]:
    """The requests in ``logs`` (Squid's stdout), in order, masked; other lines are skipped."""
    found = []
    for line in logs.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        with contextlib.suppress(ValueError):
            found.append(_request(match, destinations, secrets))
    return found


def _request(
    match: re.Match[str], destinations: tuple[Destination, ...], secrets: tuple[str, ...]
) -> Request:
    got = match.groupdict()
    method, scheme = got["method"], got["scheme"].lower()
    host = got["host"].strip("[]").lower()
    port = int(got["port"]) if got["port"].isdigit() else (443 if scheme == "https" else 80)
    refused = got["error"] == "ERR_ACCESS_DENIED" or got["result"].startswith("TCP_DENIED")
    why = refusal(method, scheme, host, port, destinations) if refused else None
    if not refused:  # why an allowed one failed at the proxy (the client gone early: no news)
        why = _ERRORS.get(got["error"])
    return Request(
        time=float(got["time"]),
        address=str(ipaddress.ip_address(got["address"])),
        method=method,
        host=mask(host, secrets),
        port=port,
        path=_path(got["url"], method, secrets),
        status=int(got["status"]) if got["status"].isdigit() else 0,
        sent=int(got["sent"]) if got["sent"].isdigit() else 0,
        received=int(got["received"]) if got["received"].isdigit() else 0,
        allowed=not refused,
        why=why,
    )


def _path(url: str, method: str, secrets: tuple[str, ...]) -> str:
    """The URL's path with its query masked (Squid left its ``?`` only) and secrets masked; a
    tunnel (``CONNECT``) has none: what went through it is encrypted, or the code's own."""
    if method == "CONNECT" or url in ("", "-"):
        return ""
    path = urlsplit(url).path if "://" in url else url
    return mask(path or "/", secrets) + (f"?{MASK}" if "?" in url else "")


def refusal(
    method: str, scheme: str, host: str, port: int, destinations: tuple[Destination, ...]
) -> str:
    """Why the proxy refused a request for ``host:port``, in the words of its rules
    (`_egress.squid_conf`): not a web request, a port the host is not listed on, an address
    no sandbox may reach although the host is listed, or a host not on the list at all."""
    if method != "CONNECT" and scheme not in ("http", "https"):
        return f"{scheme}: only HTTP and HTTPS"
    listed = [d for d in destinations if _names(d, host)]
    if not listed:
        return "not on the list"
    if not any(port in d.ports for d in listed):
        return "port not on the list"
    if all(d.network is not None for d in listed):
        return "an address no sandbox may reach"  # the host's own, another container's...
    return "resolves to an address no sandbox may reach"


def _names(destination: Destination, host: str) -> bool:
    network = destination.network
    if network is None:
        return destination.host == host
    try:
        return ipaddress.ip_address(host) in network
    except ValueError:
        return False


def refused_targets(requests: list[Request]) -> list[str]:
    """``host:port`` of each refused destination, once, in order: what a failed run's error
    names (`Sandbox._advice`)."""
    return list(dict.fromkeys(r.target for r in requests if not r.allowed))


@dataclass
class RequestLog:
    """A run's requests: the first `REQUESTS_KEPT` rows, and counts of them all."""

    rows: list[Request] = field(default_factory=list)
    total: int = 0
    allowed: int = 0
    refusals: dict[str, str] = field(default_factory=dict)
    """``host:port`` -> why, each refused destination once (the first `REFUSALS_KEPT`)."""

    @property
    def refused(self) -> int:
        return self.total - self.allowed

    def add(self, requests: list[Request]) -> None:
        for request in requests:
            self.total += 1
            self.allowed += request.allowed
            if len(self.rows) < REQUESTS_KEPT:
                self.rows.append(request)
            if not request.allowed and len(self.refusals) < REFUSALS_KEPT:
                self.refusals.setdefault(request.target, request.why or "refused")

    def to_record(self) -> RequestLogRecord:
        return {
            "total": self.total,
            "allowed": self.allowed,
            "refused": self.refused,
            "refusals": dict(self.refusals),
            "rows": [row.to_record() for row in self.rows],
        }


def address_of(client: DockerClient, container: str, network: str) -> str | None:
    """``container``'s address on ``network`` (its proxy sees requests from it), or None when
    the engine no longer says (the container ended first: its requests are then found by
    time alone). One engine round trip, for allow-listed runs only."""
    try:
        attrs = client.api.inspect_container(container)
        found = attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
    except Exception:  # an explanation only: never the run's error
        return None
    return str(found) or None
