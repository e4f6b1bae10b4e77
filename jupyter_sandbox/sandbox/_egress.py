"""Allow-listed network: a sandbox reaches the destinations it lists, through Squid, only.

Why Squid (Debian's ``squid``, 5.7 on bookworm) and not firewall rules: an allow-list names
hosts, and only a proxy sees the name a connection is for. Rules on addresses (nftables on a
per-run network) would let the code reach any name served from an allowed address (shared
CDNs), or an allowed name's server by its IP literal, and need the code to resolve names, which
is a DNS side channel. Squid is a long-maintained filtering proxy with the ACLs this needs
(``dstdomain -n``: exact names, no reverse lookups), runs unprivileged, and resolves names itself.

The shape, per allow-list and kernel (`ensure`):

- an **internal** Docker network (``--internal``: no route out of it) whose bridge has no
  address on the host (``inhibit_ipv4``): the sandbox's only neighbour is the proxy, the host
  machine and its metadata addresses are not on its network at all, and there is no resolver to
  ask (names do not resolve in the sandbox: no DNS side channel);
- a **proxy** container (Squid, hardened like a sandbox: unprivileged, read-only, no
  capabilities) on that network and on the engine's default bridge, the only way out. Its
  rules allow a request only when its host is a listed name on a listed port, or an IP
  literal inside a listed network on a listed port, over HTTP, HTTPS or ``CONNECT``; everything
  else (another host, another port, an IP literal of an allowed name, FTP and other schemes,
  the host's own addresses and every engine network's, so other containers too, loopback and
  link-local, even when an allowed name resolves to them) gets 403. Squid asks
  DNS only about allowed names (the rules are ordered so a refused name is never resolved);
  ``$JUPYTER_SANDBOX_EGRESS_DNS`` names the resolvers it asks (else the engine's);
- a **guard** in the proxy's network namespace (`_guard`): an nftables set of the host's and
  the engine networks' addresses, which rejects Squid's connections to them when they are
  made, and is updated when the host gains an address (a new Docker network, an interface):
  Squid's rules are read once, at its start;
- the sandbox's ``HTTP(S)_PROXY`` variables point at the proxy: pip, uv, requests, urllib,
  curl use it; a redirect to a refused host is a new request, refused in turn.

An allow-listed sandbox's image build (``packages``, ``system_packages``, extra commands) runs
the same way behind a proxy that allows only the package index (`for_build`): the host's
configured indexes, else PyPI, plus the Debian mirror when apt installs something.

The proxy and its network live until the kernel exits (`close_all`), or its watchdog or the next
kernel removes them (labelled ``kind=egress``, `remove_owned`). Runs that share an allow-list
share them (two such containers can reach each other's ports: the same kernel's runs). A proxy
that dies (killed from outside) is replaced on the same network by the next run that needs it:
runs in flight keep their containers, and one whose requests failed meanwhile says so
(`Egress.lost`).
Podman is refused: its networks do not take the options that keep the host off the network.
gVisor (runsc ``--network=none``) is refused by `create`.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._shared._errors import ContainerError, SandboxConfigError
from .._shared._events import EventCallback
from ._allowlist import Destination, allow_list, describe, require_docker
from ._client import KIND, LABEL, engine_of, orphaned, owner_labels
from ._hostcfg import debian_mirror, index_settings
from ._image import default_base_image, ensure_image
from ._spec import ImageSpec

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container
    from docker.models.networks import Network

    from . import _guard
    from ._inject import Injection
    from ._requests import Request

DNS_ENV = "JUPYTER_SANDBOX_EGRESS_DNS"
"""Comma-separated resolver addresses the proxy asks (default: the engine's, as for any
container): an admin's choice, and the tests' resolver that sees every query."""
EGRESS = "egress"
"""The ``kind`` label of the proxies and networks made here."""
OF_NETWORK = f"{LABEL}.egress"
"""The label naming the network a proxy or guard serves (a guard is on no network itself)."""
PORT = 3128
PROXY_PACKAGES = ("nftables", "squid")
_READY_WAIT = 30.0
_ALWAYS_BLOCKED = (
    "0.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",  # link-local: cloud metadata (169.254.169.254, .170.2)
    "224.0.0.0/3",
    "::/127",
    "::ffff:0:0/96",
    "fe80::/10",
    "fc00::/7",
    "ff00::/8",
)
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX = "[0-9a-f]{1,4}"


def _literals() -> list[str]:
    """Regular expressions (POSIX, as Squid reads them) of a request's host as an IP literal:
    a dotted quad, or IPv6 as eight groups or with one ``::`` standing for at least one.

    Exact forms only, so a host that only looks numeric stays a name and is refused unresolved:
    Squid writes a numeric host it parsed (``2130706433``, ``0x7f.1``) as a plain dotted quad,
    and keeps one that is no address (``09.1.1.1``, ``1:2:3:4:5:6:7:8:9``) as a name, which an
    address rule (``dst``) would look up in DNS."""
    v6 = [rf"{_HEX}(:{_HEX}){{7}}"]
    for before in range(8):
        head = rf"{_HEX}(:{_HEX}){{{before - 1}}}" if before else ""
        tail = rf"({_HEX}(:{_HEX}){{0,{6 - before}}})?" if before < 7 else ""
        v6.append(f"{head}::{tail}")
    return [rf"^{_OCTET}(\.{_OCTET}){{3}}$", *(rf"^\[?{form}\]?$" for form in v6)]


_REFUSED = "%U is not on this sandbox's network allow-list (jupyter-sandbox)"
"""Squid's page for a refused request. Its own pages mail-link the client's details (%W), for
which it looked the client's address up in DNS: a query no allow-list asked for."""
_STARTUP = (
    "mkdir /tmp/errors && cp /usr/share/squid/errors/templates/* /tmp/errors/"
    " && sed -i 's/%W//g' /tmp/errors/*"
    ' && printf "%s\\n" "$SQUID_REFUSED" >/tmp/errors/ERR_ACCESS_DENIED'
    ' && printf "%s\\n" "$SQUID_CONF" >/tmp/squid.conf && unset SQUID_CONF'
    " && exec squid -N -f /tmp/squid.conf"
)
"""Squid's start in its read-only container: the error pages and configuration on a tmpfs
(Squid's own environment without the configuration, which may hold secrets: `_inject`)."""
_GUARD_STARTUP = 'printf "%s\\n" "$NFT_RULES" | nft -f - && echo ready && exec sleep infinity'
"""The guard's start: its table in the proxy's namespace, then nothing but waiting for updates."""
_SQUID = """\
http_port {port}
error_directory /tmp/errors
pid_filename none
cache deny all
cache_mem 0 MB
{logformat}
access_log stdio:/dev/stdout jsbx
cache_log stdio:/dev/stderr
cache_store_log none
logfile_rotate 0
coredump_dir /tmp
netdb_filename none
hosts_file none
pinger_enable off
icp_port 0
htcp_port 0
snmp_port 0
via off
forwarded_for delete
httpd_suppress_version_string on
visible_hostname jupyter-sandbox-egress
shutdown_lifetime 0 seconds
connect_timeout 15 seconds
"""


@dataclass
class Egress:
    """One allow-list's proxy and the internal network runs join."""

    network: str
    proxy: Container
    guard: Container
    address: str
    destinations: tuple[Destination, ...]
    injection: Injection | None = None
    """The secrets this proxy adds to requests (`_inject`): its own runs' only."""
    created: float = field(default_factory=time.time)
    """When the serving proxy started (a replaced one's successor: later)."""

    @property
    def url(self) -> str:
        return f"http://{self.address}:{PORT}"

    def environment(self) -> dict[str, str]:
        """What a run's environment gets: the proxy, under every name clients read."""
        names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        return {name: self.url for name in names}

    def requests(
        self,
        since: float,
        until: float | None = None,
        address: str | None = None,
        secrets: tuple[str, ...] = (),
    ) -> list[Request]:
        """The requests made from ``address`` (a run's container; None: from anywhere) that
        started between ``since`` and ``until`` (epoch seconds), in the order they started,
        with ``secrets`` masked (`_requests`). One read of the proxy's log, from ``since`` on."""
        from ._requests import parse  # here: an allow-listed run's, not `%load_ext`'s

        try:
            logs = self.proxy.logs(stdout=True, stderr=False, since=int(since)).decode(
                "utf-8", "replace"
            )
        except Exception:  # an account only: never an error of its own
            return []
        found = [
            request
            for request in parse(logs, self.destinations, secrets)
            if since <= request.time <= (until if until is not None else request.time)
            and (address is None or request.address == address)
        ]
        return sorted(found, key=lambda request: request.time)  # Squid logs them as they end

    @staticmethod
    def refused(requests: list[Request]) -> list[str]:
        """``host:port`` of each destination ``requests`` were refused, once, in order."""
        from ._requests import refused_targets

        return refused_targets(requests)

    def lost(self, since: float) -> bool:
        """Whether the proxy a run started with (``since``, epoch seconds) stopped serving: it
        died, or was replaced since. Asked only for a failed run (an engine round trip)."""
        return self.created > since or not _alive(self.proxy.client, self)

    def close(self, client: DockerClient) -> None:
        """Remove the proxy, its guard, whatever is still on the network, and the network."""
        remove_network(client, self.network)


_lock = threading.Lock()
_egresses: dict[tuple[str, tuple[Destination, ...], str], Egress] = {}
_clients: dict[str, DockerClient] = {}


def ensure(
    client: DockerClient,
    destinations: tuple[Destination, ...],
    emit: EventCallback,
    injection: Injection | None = None,
) -> Egress:
    """The running egress of ``destinations`` on ``client``'s engine, made on first use; with
    ``injection``, one of its own that adds those secrets (`_inject`), shared only by runs
    that add the same."""
    engine = engine_of(client)
    require_docker(engine.name, engine.url)  # `_plan` refused it already; a build comes here
    key = (engine.url, destinations, injection.key() if injection is not None else "")
    with _lock:
        _watch()
        if _events is not None and _events.pending():
            _refresh()
        egress = _egresses.get(key)
        if egress is not None and (_alive(client, egress) or _replace(client, egress, emit)):
            return egress
        if egress is not None:
            egress.close(client)
        _clients[engine.url] = client
        egress = _start(client, destinations, emit, injection)
        _egresses[key] = egress
        return egress


_events: _guard.AddressEvents | None = None


def _watch() -> None:
    """Subscribe to the host's address changes before the first proxy's addresses are read
    (nothing between the two is missed), and wait on them for runs in flight. Under `_lock`."""
    global _events
    if _events is not None:
        return
    from . import _guard  # here: only an allow-listed run needs it, not `%load_ext`

    _events = _guard.AddressEvents()
    if _events.fileno() is not None:
        threading.Thread(target=_follow, args=(_events,), name="egress-guard", daemon=True).start()


def _follow(events: _guard.AddressEvents) -> None:
    while True:
        events.wait(None)
        with _lock:
            if events.pending():
                _refresh()


def _refresh() -> None:
    """Give every guard the host's and the engine's addresses as they are now. Under `_lock`;
    only when they changed: an engine round trip and an exec per proxy."""
    from . import _guard  # loaded by `_watch` already

    current: dict[str, list[str]] = {}
    for (url, _, _), egress in _egresses.items():
        client = _clients[url]
        if url not in current:
            with contextlib.suppress(Exception):  # an engine gone: its runs fail on their own
                current[url] = host_addresses(client)
        if url in current:
            with contextlib.suppress(Exception):  # a guard gone: `_alive` replaces it
                egress.guard.exec_run(["nft", _guard.update(current[url])])


PYPI = ("pypi.org", "files.pythonhosted.org")
"""Where uv and pip find packages by default: the index and the files it links to."""


def index_destinations(*, system: bool) -> tuple[Destination, ...]:
    """The package index a build may reach: the host's configured indexes (`_hostcfg`), else
    PyPI; with ``system`` (apt packages) also the host's Debian mirror and deb.debian.org."""
    urls = [u for value in index_settings().values() for u in value.split()]
    entries = [_host_port(u) for u in urls] or [f"{host}:443" for host in PYPI]
    if system:
        entries += [_host_port(debian_mirror()), "deb.debian.org:80", "deb.debian.org:443"]
    return allow_list(entries)


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def for_build(
    client: DockerClient, spec: ImageSpec, emit: EventCallback
) -> Callable[[], tuple[str, dict[str, str]]]:
    """What `ensure_image` calls when an allow-listed sandbox's image must be built: the
    network (an egress allowing only the package index) and the proxy variables of its steps."""

    def network() -> tuple[str, dict[str, str]]:
        egress = ensure(client, index_destinations(system=bool(spec.system_packages)), emit)
        return egress.network, egress.environment()

    return network


def _alive(client: DockerClient, egress: Egress) -> bool:
    """Whether the proxy and its guard both run: one engine call."""
    try:
        rows = client.api.containers(filters={"label": f"{OF_NETWORK}={egress.network}"})
    except Exception:
        return False
    running = {row["Id"] for row in rows if row.get("State") == "running"}
    return {egress.proxy.id, egress.guard.id} <= running


def _replace(client: DockerClient, egress: Egress, emit: EventCallback) -> bool:
    """Start a new proxy and guard on ``egress``'s network in place of dead ones, leaving the
    runs on it alone (they get the new address with their next run); False when the network
    itself is gone."""
    from docker.errors import NotFound

    served = client.api.containers(all=True, filters={"label": f"{OF_NETWORK}={egress.network}"})
    for row in served:  # the dead pair, and any half-started one of an earlier attempt
        with contextlib.suppress(Exception):
            client.api.remove_container(row["Id"], force=True)
    try:
        network = client.networks.get(egress.network)
    except NotFound:
        return False
    egress.proxy, egress.guard, egress.address = _launch(
        client, network, egress.destinations, emit, egress.injection
    )
    egress.created = time.time()
    return True


def proxy_image(
    client: DockerClient, emit: EventCallback, packages: tuple[str, ...] = PROXY_PACKAGES
) -> str:
    """The proxy's image: Debian's squid on the base image, built once (`scripts/bootstrap.sh`
    builds it ahead; otherwise the first allow-listed run does, ~10 s); with ``packages``
    `_inject.TLS_PACKAGES`, the intercepting proxy's (the first run with a `Secret`'s)."""
    spec = ImageSpec.normalise(default_base_image(), system_packages=packages)
    image, _, info = ensure_image(client, spec, emit)
    if info is not None and info.error is not None:
        from ._image import build_error

        raise build_error(spec, info)
    return image


def _start(
    client: DockerClient,
    destinations: tuple[Destination, ...],
    emit: EventCallback,
    injection: Injection | None = None,
) -> Egress:
    name = f"jupyter-sandbox-egress-{secrets.token_hex(6)}"
    network = client.networks.create(
        name,
        driver="bridge",
        internal=True,
        labels=_labels(destinations),
        options={
            "com.docker.network.bridge.inhibit_ipv4": "true",
            "com.docker.network.bridge.enable_ip_masquerade": "false",
        },
    )
    try:
        proxy, guard, address = _launch(client, network, destinations, emit, injection)
    except BaseException:
        remove_network(client, name)
        raise
    return Egress(name, proxy, guard, address, destinations, injection)


def _labels(destinations: tuple[Destination, ...]) -> dict[str, str]:
    labels = {LABEL: "1", KIND: EGRESS, f"{LABEL}.allow": describe(destinations)[:1000]}
    labels.update(owner_labels())
    return labels


def _launch(
    client: DockerClient,
    network: Network,
    destinations: tuple[Destination, ...],
    emit: EventCallback,
    injection: Injection | None = None,
) -> tuple[Container, Container, str]:
    """A started proxy on ``network`` with its guard: (proxy, guard, the proxy's address
    there). The caller removes what is left when this raises (both carry the network's
    label)."""
    from docker.types import LogConfig

    from . import _guard

    startup, environment = _STARTUP, {}
    if injection is None:
        image = proxy_image(client, emit)
    else:
        from . import _inject

        image = proxy_image(client, emit, _inject.TLS_PACKAGES)
        startup = _inject.STARTUP + _STARTUP
        environment = _inject.proxy_environment(client, emit)
    name = str(network.name)
    labels = {**_labels(destinations), OF_NETWORK: name}
    subnets = [c["Subnet"] for c in (network.attrs.get("IPAM") or {}).get("Config") or []]
    blocked = [*subnets, *host_addresses(client)]
    dns = _dns()
    conf = squid_conf(destinations, clients=subnets, blocked=blocked, dns=dns, injection=injection)
    hardened: dict[str, Any] = {
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": labels,
        "stop_signal": "SIGKILL",
    }
    proxy = client.containers.create(
        image,
        command=["sh", "-c", startup],
        environment={"SQUID_CONF": conf, "SQUID_REFUSED": _REFUSED, **environment},
        user="proxy",
        network_mode="bridge",
        tmpfs={p: "rw,nosuid,nodev,size=16m" for p in ("/tmp", "/run", "/var/spool/squid")},
        pids_limit=64,
        mem_limit=256 * 2**20,
        nano_cpus=10**9,
        # its access log is each run's account of what it sent out (`requests`): kept
        # where the engine's API reads it back, and bounded however long the kernel lives
        log_config=LogConfig(type="json-file", config={"max-size": "8m", "max-file": "2"}),
        **hardened,
    )
    network.connect(proxy)
    proxy.start()
    guard = client.containers.create(
        image,
        command=["sh", "-c", _GUARD_STARTUP],
        environment={"NFT_RULES": _guard.rules(blocked, dns)},
        user="root",
        network_mode=f"container:{proxy.id}",
        cap_add=["NET_ADMIN"],  # in the proxy's network namespace only: its filter
        pids_limit=8,
        mem_limit=32 * 2**20,
        **hardened,
    )
    guard.start()
    _wait_for(guard, "ready", "the allow-list's packet filter (nftables)", stdout=True)
    return proxy, guard, _wait_ready(proxy, name)


def _wait_ready(proxy: Container, network: str) -> str:
    """The proxy's address on ``network`` once Squid accepts connections."""
    # "Accepting HTTP Socket connections at", or "Accepting SSL bumped HTTP..." (`_inject`)
    _wait_for(proxy, "HTTP Socket connections at", "the allow-list's proxy (Squid)")
    return str(proxy.attrs["NetworkSettings"]["Networks"][network]["IPAddress"])


def _wait_for(container: Container, line: str, what: str, *, stdout: bool = False) -> None:
    """Until ``container`` wrote ``line`` (on stderr, or stdout); `ContainerError` with its
    last line when it stops first or takes over `_READY_WAIT` s."""
    deadline = time.monotonic() + _READY_WAIT
    while True:
        container.reload()
        logs = container.logs(stdout=stdout, stderr=True).decode("utf-8", "replace")
        if line in logs:
            return
        if container.status not in ("created", "running") or time.monotonic() > deadline:
            last = (logs.strip().splitlines() or ["(no output)"])[-1]
            raise ContainerError(f"{what} did not start: {last}")
        time.sleep(0.05)


def squid_conf(
    destinations: tuple[Destination, ...],
    *,
    clients: list[str],
    blocked: list[str],
    dns: list[str],
    injection: Injection | None = None,
) -> str:
    """Squid's configuration for ``destinations``: one allow rule per destination, every other
    request refused, and every client not on ``clients`` (the internal network: the proxy's
    other side, the engine's bridge, serves nobody). Rule order matters: a name's rule tests
    the name first (no DNS), an address rule only IP literals (no DNS), so only allowed names
    are ever resolved. ``injection``'s header rules (`_inject`) follow the access rules."""
    from ._requests import LOGFORMAT

    port = f"{PORT}"
    if injection is not None:
        from ._inject import port_options

        port += port_options()
    lines = [_SQUID.format(port=port, logformat=LOGFORMAT)]
    if dns:
        lines.append("dns_nameservers " + " ".join(dns))
    lines.append("acl literal dstdom_regex -n -i " + " ".join(_literals()))
    lines.append("acl blocked dst " + " ".join(dict.fromkeys([*_ALWAYS_BLOCKED, *blocked])))
    lines.append("acl web proto HTTP HTTPS")
    lines.append("acl tunnel method CONNECT")
    lines.append("acl sandboxes src " + " ".join(clients))
    lines.append("http_access deny !sandboxes")
    lines.append("http_access deny manager")
    lines.append("http_access deny !web !tunnel")  # no FTP, WHOIS, URN...: HTTP(S) only
    for n, dest in enumerate(destinations):
        lines.append(f"acl port{n} port " + " ".join(str(p) for p in dest.ports))
        if dest.network is None:
            lines.append(f"acl to{n} dstdomain -n {dest.host}")
            lines.append(f"http_access allow to{n} port{n} !blocked")
        else:
            lines.append(f"acl to{n} dst {dest.network}")
            lines.append(f"http_access allow literal to{n} port{n} !blocked")
    lines.append("http_access deny all")
    if injection is not None:
        from ._inject import squid_rules, tls_rules

        lines += squid_rules(injection) + tls_rules(injection)
    return "\n".join(lines) + "\n"


def _dns() -> list[str]:
    text = os.environ.get(DNS_ENV, "").strip()
    if not text:
        return []
    found = []
    for part in text.split(","):
        try:
            found.append(str(ipaddress.ip_address(part.strip())))
        except ValueError:
            raise SandboxConfigError(
                f"${DNS_ENV} must list resolver IP addresses, comma-separated: not {part!r}"
            ) from None
    return found


def host_addresses(client: DockerClient) -> list[str]:
    """The engine host's own addresses and its containers' networks, never a destination: every
    engine network's subnet and gateway (other containers, an allow-list's own network), and,
    for a local engine, this machine's interface addresses."""
    found: list[str] = []
    for net in client.api.networks():
        for conf in (net.get("IPAM") or {}).get("Config") or []:
            found += [str(conf[k]) for k in ("Subnet", "Gateway") if conf.get(k)]
    if client.api.base_url.startswith("http+docker://") and shutil.which("ip") is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
            out = subprocess.run(["ip", "-j", "addr"], capture_output=True, timeout=10, check=True)
            for link in json.loads(out.stdout):
                found += [str(a["local"]) for a in link.get("addr_info", []) if a.get("local")]
    return [a for a in dict.fromkeys(found) if _is_network(a)]  # else a remote engine's only


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def remove_network(client: DockerClient, name: str) -> None:
    """Remove an egress network with every container on it (the proxy, any spare left)."""
    from docker.errors import NotFound

    try:
        network = client.networks.get(name)
    except NotFound:
        return
    ids = {*(network.attrs.get("Containers") or {})}
    ids.update(row["Id"] for row in client.api.containers(all=True, filters={"network": name}))
    guards = client.api.containers(all=True, filters={"label": f"{OF_NETWORK}={name}"})
    ids.update(row["Id"] for row in guards)  # a guard shares the proxy's namespace: no network
    for cid in ids:
        with contextlib.suppress(Exception):
            client.api.remove_container(cid, force=True)
    with contextlib.suppress(NotFound):
        network.remove()


def remove_owned(client: DockerClient, owner: dict[str, str] | None = None) -> list[str]:
    """Remove the egress networks (and proxies) of ``owner``'s labels, or, without one, of
    owners no longer alive on this host; their names. For the watchdog and the reaper."""
    removed = []
    for net in client.api.networks(filters={"label": f"{KIND}={EGRESS}"}):
        labels: dict[str, Any] = net.get("Labels") or {}
        if owner is not None:
            if any(labels.get(k) != v for k, v in owner.items()):
                continue
        elif not orphaned(labels):
            continue
        remove_network(client, str(net["Name"]))
        removed.append(str(net["Name"]))
    return removed


def close_all() -> None:
    """Remove every egress this process made (at exit)."""
    with _lock:
        for (url, _, _), egress in list(_egresses.items()):
            with contextlib.suppress(Exception):
                egress.close(_clients[url])
        _egresses.clear()


atexit.register(close_all)
