"""Secrets the allow-list's proxy adds to requests, so the sandbox's code never holds them.

A plain secret (``secrets=["TOKEN"]``) is the real value in the container's environment,
masked in what comes back: code that means to leak it can (encode it, send it to an allowed
host). A `Secret` with ``hosts`` is never given to the code: the container's environment holds
a *placeholder* under the same name (random, fresh per run, not the secret), so client
libraries that insist on a key find one, and the run's proxy (Squid, `_egress`) sets the
secret's header on each request it forwards to one of those hosts, dropping whatever the code
sent in that header. A request to any other host, a redirect away from the secret's host
included, is forwarded as the code wrote it: with the placeholder, at most.

Why Squid's own rules and not a second proxy: the proxy already sees every request and its
destination; ``request_header_access <header> deny <acl>`` drops the code's header and
``request_header_add <header> "<value>" <acl>`` adds ours, both only where the destination
ACL (``dstdomain -n``: the exact name, no lookup) matches. Squid 5.7 (Debian 12) has both.
The value lives in Squid's configuration, in the proxy's container (which the sandbox can
neither reach as files nor ask: the cache manager is refused), never in the sandbox's, and
never in the access log (its format names no header).

HTTPS to a secret's host is intercepted, and nothing else is. Such a proxy is Squid built with
OpenSSL (Debian's ``squid-openssl``, the same 5.7, in an image of its own: `TLS_PACKAGES`) with
``ssl-bump``: a ``CONNECT`` to any other host is spliced at once (end-to-end TLS, as without a
secret: the proxy never reads the client's hello); one to a secret's host is peeked, stared
and bumped, so Squid checks the real server's certificate (the system's CAs, plus the file
``$JUPYTER_SANDBOX_EGRESS_CA`` names: an internal API's CA, the tests' own) before the secret
is sent, and shows the code a certificate for that name signed by this kernel's CA
(`kernel_ca`). That CA is made once per kernel, its key in a 0600 file in a 0700 directory
on the host and on the proxy's tmpfs, never in a sandbox: a run trusts its certificate
through the bundle it is given (`trust`: the run's ``ca_bundle`` or the host's bundle, plus
this CA), named by ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``NODE_EXTRA_CA_CERTS``....
A Python proxy (mitmproxy) would do the same in more code of ours on the request path; Squid
is already there, with its ACLs deciding which host is intercepted.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import secrets as _random
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._shared._errors import ContainerError, SandboxConfigError
from .._shared._events import EventCallback
from ._allowlist import Destination

if TYPE_CHECKING:
    from docker import DockerClient

TLS_PACKAGES = ("nftables", "openssl", "squid-openssl")
"""The intercepting proxy's image: Squid with ``ssl-bump``, and OpenSSL to make the CA."""
UPSTREAM_CA_ENV = "JUPYTER_SANDBOX_EGRESS_CA"
"""A PEM file of CAs the intercepting proxy trusts for a secret's hosts, beside the system's."""
CA_NAME = "jupyter-sandbox kernel CA"

_HEADER = re.compile(r"[A-Za-z0-9-]{1,64}\Z")
_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
_VALUE = re.compile(r"[\x20-\x7e]{1,8192}\Z")
"""A header value Squid's configuration can hold: printable ASCII, one line."""
_UNQUOTABLE = frozenset('"\\')


@dataclass(frozen=True)
class Secret:
    """A host environment variable the sandbox uses by name (Flyte's ``Secret(key=...)``).

    Without ``hosts``, the value is in the container's environment (as a plain name in
    ``secrets=``). With ``hosts``, the proxy adds ``header: format.format(value)`` to every
    request to those hosts (each must be on the sandbox's allow-list) and the container's
    ``as_env_var`` (default ``key``) holds a placeholder instead; HTTPS to them included.
    """

    key: str
    hosts: Sequence[str] = ()
    """The hosts (exact names on the allow-list) it is sent to; kept as a tuple."""
    header: str = "Authorization"
    format: str = "Bearer {}"
    as_env_var: str | None = None

    def __post_init__(self) -> None:
        hosts = (self.hosts,) if isinstance(self.hosts, str) else tuple(self.hosts)
        object.__setattr__(self, "hosts", hosts)  # one host as a str is one host

    @property
    def env_name(self) -> str:
        return self.as_env_var or self.key


@dataclass(frozen=True)
class Injection:
    """What one run's proxy adds: (hosts, header, value) per injected secret. The egress of an
    allow-list is shared by runs with the same injections only (`key`)."""

    rules: tuple[tuple[tuple[str, ...], str, str], ...]

    def key(self) -> str:
        """A digest naming these rules (the values never leave this object as text)."""
        return hashlib.sha256(repr(self.rules).encode()).hexdigest()[:16]

    def values(self) -> tuple[str, ...]:
        return tuple(value for _, _, value in self.rules)


def split(
    entries: Iterable[str | Secret] | None, network: object
) -> tuple[tuple[str, ...], tuple[Secret, ...]]:
    """``secrets=`` as plain names (today's meaning) and injected `Secret`\\ s, each checked
    against ``network`` (an allow-list's destinations, or ``"none"``/``"bridge"``)."""
    if entries is None:
        return (), ()
    if isinstance(entries, str) or not isinstance(entries, Iterable):
        raise SandboxConfigError("secrets must be a list of strings (names) or Secret(...) entries")
    plain: list[str] = []
    injected: list[Secret] = []
    for entry in entries:
        if isinstance(entry, str):
            plain.append(entry)
        elif isinstance(entry, Secret):
            if entry.hosts:
                injected.append(_checked(entry, network))
            elif entry.env_name != entry.key:
                raise SandboxConfigError(
                    f"Secret {entry.key!r}: as_env_var renames a placeholder, so give hosts=[...]"
                    " (a secret passed in the environment keeps its name)"
                )
            else:
                plain.append(entry.key)
        else:
            raise SandboxConfigError(
                f"secrets entries must be names or Secret(...), not {type(entry).__name__}"
            )
    return tuple(plain), tuple(injected)


def _checked(secret: Secret, network: object) -> Secret:
    if not isinstance(network, tuple):
        raise SandboxConfigError(
            f"Secret {secret.key!r} is added by the allow-list's proxy: list its hosts in"
            f" network=[...] (a network of {network!r} has no proxy)",
            parameter="network",
        )
    listed = {d.host for d in network if isinstance(d, Destination) and d.network is None}
    if not all(isinstance(h, str) for h in secret.hosts):
        raise SandboxConfigError(f"Secret {secret.key!r}: hosts must be host names (strings)")
    hosts = tuple(h.lower().rstrip(".") for h in secret.hosts)
    for host in hosts:
        if not _HOST.match(host):
            raise SandboxConfigError(f"Secret {secret.key!r}: bad host name {host!r}")
        if host not in listed:
            raise SandboxConfigError(
                f"Secret {secret.key!r} is for {host!r}, which is not on the network allow-list:"
                f" add {host!r} to network=[...]",
                parameter="network",
            )
    if not _HEADER.match(secret.header):
        raise SandboxConfigError(f"Secret {secret.key!r}: bad header name {secret.header!r}")
    if secret.format.count("{}") != 1:
        raise SandboxConfigError(
            f"Secret {secret.key!r}: format must hold one {{}} for the value,"
            f" such as 'Bearer {{}}', not {secret.format!r}"
        )
    return Secret(secret.key, hosts, secret.header, secret.format, secret.as_env_var)


def parse_secret_for(entries: Sequence[str]) -> list[Secret]:
    """``--secret-for HOST:NAME`` entries as `Secret`\\ s (the ``Authorization: Bearer`` form):
    one per name, with every host given for it."""
    hosts: dict[str, list[str]] = {}
    for entry in entries:
        host, sep, name = entry.rpartition(":")
        if not sep or not host or not name:
            raise SandboxConfigError(
                f"--secret-for takes HOST:NAME, such as api.openai.com:OPENAI_API_KEY,"
                f" not {entry!r}"
            )
        hosts.setdefault(name, []).append(host)
    return [Secret(name, hosts=tuple(found)) for name, found in hosts.items()]


def placeholders(injected: Sequence[Secret]) -> dict[str, str]:
    """The container's variables for ``injected``: a fresh random value each, never a secret."""
    return {s.env_name: "jsbx-placeholder-" + _random.token_hex(16) for s in injected}


def injection(injected: Sequence[Secret], environ: Mapping[str, str]) -> Injection:
    """The proxy's rules for ``injected``, with each value read from ``environ`` now; one-line
    errors that name the variable, never its value."""
    rules = []
    for secret in injected:
        if secret.key not in environ:
            raise SandboxConfigError(f"secret {secret.key!r} is not set in the host environment")
        value = secret.format.replace("{}", environ[secret.key])
        if not _VALUE.match(value) or _UNQUOTABLE & set(value):
            raise SandboxConfigError(
                f"secret {secret.key!r}: a header's value must be printable ASCII on one line,"
                " without quotes or backslashes"
            )
        rules.append((tuple(secret.hosts), secret.header, value))
    return Injection(tuple(rules))


def squid_rules(injection: Injection) -> list[str]:
    """Squid's lines for ``injection``: per secret, an ACL of its hosts, the code's header
    dropped and ours added on requests to them (``%`` doubled: Squid reads it as a format)."""
    lines = []
    for n, (hosts, header, value) in enumerate(injection.rules):
        quoted = value.replace("%", "%%")
        lines.append(f"acl inject{n} dstdomain -n {' '.join(hosts)}")
        lines.append(f"request_header_access {header} deny inject{n}")
        lines.append(f'request_header_add {header} "{quoted}" inject{n}')
    return lines


_MAKE_CA = (
    "cd /tmp && openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    " -keyout ca.key -out ca.pem -days 30 -subj '/CN=" + CA_NAME + "'"
    " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign"
    " 2>/dev/null && cat ca.key ca.pem"
)
"""The CA's key and certificate on stdout, made in a container of no network."""


@dataclass(frozen=True)
class KernelCA:
    """This kernel's interception CA: its certificate (PEM) and the 0600 file of its key."""

    cert: str
    key_file: Path

    def key(self) -> str:
        return self.key_file.read_text()


_ca: KernelCA | None = None
_ca_lock = threading.Lock()


def kernel_ca(client: DockerClient, emit: EventCallback) -> KernelCA:
    """This kernel's CA, made at its first intercepting run (OpenSSL in the proxy's image:
    the host needs no OpenSSL tool and the package no crypto library)."""
    global _ca
    with _ca_lock:
        if _ca is not None and _ca.key_file.is_file():
            return _ca
        from ._egress import proxy_image

        image = proxy_image(client, emit, TLS_PACKAGES)
        out = client.containers.run(
            image,
            ["sh", "-c", _MAKE_CA],
            remove=True,
            network_mode="none",
            user="proxy",
            read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=1m"},
            cap_drop=["ALL"],
        ).decode()
        key, sep, cert = out.partition("-----END PRIVATE KEY-----\n")
        if not sep or "BEGIN CERTIFICATE" not in cert:
            raise ContainerError("the allow-list's interception CA could not be made (openssl)")
        where = Path(tempfile.mkdtemp(prefix="jupyter-sandbox-ca-"))  # 0700
        atexit.register(shutil.rmtree, where, True)
        key_file = where / "ca.key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + sep)
        _ca = KernelCA(cert.strip() + "\n", key_file)
        return _ca


def trust(client: DockerClient, given: bytes | None, emit: EventCallback) -> bytes:
    """The CA bundle a run with injected secrets trusts: ``given`` (its ``ca_bundle``) or the
    host's, and this kernel's CA."""
    from ._allowlist import require_docker
    from ._client import engine_of
    from ._hostcfg import ca_bundle

    engine = engine_of(client)
    require_docker(engine.name, engine.url)  # Podman: refused before a CA is made there
    if given is None:
        host = ca_bundle()
        given = host.read_bytes() if host is not None else b""
    return given.rstrip(b"\n") + b"\n" + kernel_ca(client, emit).cert.encode()


def upstream_ca() -> str:
    """The PEM text of ``$JUPYTER_SANDBOX_EGRESS_CA`` ("" when unset)."""
    path = os.environ.get(UPSTREAM_CA_ENV, "").strip()
    if not path:
        return ""
    from ._hostcfg import read_ca_bundle

    return read_ca_bundle(path).decode()


def port_options() -> str:
    """What an intercepting proxy's ``http_port`` adds: bumping with the CA's files."""
    return (
        " ssl-bump tls-cert=/tmp/ca.pem tls-key=/tmp/ca.key generate-host-certificates=on"
        " dynamic_cert_mem_cache_size=4MB"
    )


def tls_rules(injection: Injection) -> list[str]:
    """Squid's interception lines: splice every tunnel that is not to a secret's host (at the
    first step, before the client's hello is read), bump those after checking the server."""
    hosts = sorted({host for hosts, _, _ in injection.rules for host in hosts})
    lines = [
        "sslcrtd_program /usr/lib/squid/security_file_certgen -s /tmp/ssl_db -M 4MB",
        "sslcrtd_children 2 startup=1 idle=1",
        f"acl intercepted dstdomain -n {' '.join(hosts)}",
        "acl step1 at_step SslBump1",
        "acl step2 at_step SslBump2",
        "ssl_bump splice !intercepted",
        "ssl_bump peek step1",
        "ssl_bump stare step2",
        "ssl_bump bump all",
    ]
    if upstream_ca():
        lines.append("tls_outgoing_options cafile=/tmp/upstream.pem")
    return lines


STARTUP = (
    "umask 077 && printf '%s' \"$SQUID_CA_KEY\" >/tmp/ca.key"
    " && printf '%s' \"$SQUID_CA_CERT\" >/tmp/ca.pem"
    " && printf '%s' \"$SQUID_UPSTREAM_CA\" >/tmp/upstream.pem"
    " && unset SQUID_CA_KEY && /usr/lib/squid/security_file_certgen -c -s /tmp/ssl_db -M 4MB"
    " >/dev/null && "
)
"""What an intercepting proxy does before `_egress`'s start: the CA's files on its tmpfs."""


def proxy_environment(client: DockerClient, emit: EventCallback) -> dict[str, str]:
    """The intercepting proxy's variables its start (`STARTUP`) writes as files."""
    ca = kernel_ca(client, emit)
    return {"SQUID_CA_KEY": ca.key(), "SQUID_CA_CERT": ca.cert, "SQUID_UPSTREAM_CA": upstream_ca()}
