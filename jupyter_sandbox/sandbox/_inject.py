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
never in the access log (its format names no header). Only plain HTTP requests carry it here:
an HTTPS request is a ``CONNECT`` tunnel the proxy cannot read, so it goes through unchanged.
"""

from __future__ import annotations

import hashlib
import re
import secrets as _random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .._errors import SandboxConfigError
from ._allowlist import Destination

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
    ``as_env_var`` (default ``key``) holds a placeholder instead. Plain HTTP only, for now.
    """

    key: str
    hosts: tuple[str, ...] = ()
    header: str = "Authorization"
    format: str = "Bearer {}"
    as_env_var: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", tuple(self.hosts))

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
            else:
                plain.append(entry.env_name)
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
    hosts = tuple(h.lower().rstrip(".") for h in secret.hosts)
    for host in hosts:
        if not isinstance(host, str) or not _HOST.match(host):
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
        rules.append((secret.hosts, secret.header, value))
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
