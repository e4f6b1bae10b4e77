"""What a build borrows from the host: its CA bundle and its package-index settings; and the
CA bundle a sandbox is given (``create(ca_bundle=...)``), checked and read.

A host behind a TLS-inspecting proxy (as many corporate ones are) builds only when the installs
inside a build trust the host's CA bundle. Only these settings cross into a build, as
build arguments that never reach the final image's environment; nothing else from the host
environment enters a build or a run. A run trusts a CA only when it is given a bundle: the
code's HTTPS then verifies against that file and nothing else.
"""

from __future__ import annotations

import configparser
import os
import re
import stat
from pathlib import Path

from .._shared._errors import SandboxConfigError

_CA_CANDIDATES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)
_PIP_CONFIG_FILES = (
    "/etc/pip.conf",
    "/etc/xdg/pip/pip.conf",
    "~/.config/pip/pip.conf",
    "~/.pip/pip.conf",
)


def _pip_config() -> dict[str, str]:
    """The ``[global]`` section of the host's pip configuration files, later files winning."""
    parser = configparser.ConfigParser()
    files = [os.path.expanduser(p) for p in _PIP_CONFIG_FILES]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    parser.read(files)
    return dict(parser["global"]) if parser.has_section("global") else {}


def ca_bundle() -> Path | None:
    """The CA bundle the host's pip trusts (its ``cert`` setting), else the system bundle."""
    configured = os.environ.get("PIP_CERT") or _pip_config().get("cert")
    for candidate in (configured, *_CA_CANDIDATES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


CA_BUNDLE_CEILING_BYTES = 4 * 2**20
"""Bytes a given CA bundle may have: a system bundle of every public CA is ~220 KB, so a
bigger file is not a bundle (and each run copies it)."""
_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


def read_ca_bundle(path: str | os.PathLike[str]) -> bytes:
    """The PEM certificates of the file at ``path``, or a one-line `SandboxConfigError`
    (parameter ``ca_bundle``) saying what is wrong: missing, not a regular file, too big, or
    no PEM certificate in it (a DER file, a key, a typo'd path to something else)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise SandboxConfigError(
            f"ca_bundle must be the path of a PEM file, not {path!r}", parameter="ca_bundle"
        )
    shown = str(path)
    file = Path(path).expanduser()
    try:
        info = file.stat()
    except FileNotFoundError:
        raise SandboxConfigError(
            f"ca_bundle {shown!r} does not exist: give a PEM file of CA certificates"
            + host_bundle_note(),
            parameter="ca_bundle",
        ) from None
    except OSError as exc:
        raise SandboxConfigError(
            f"ca_bundle {shown!r} cannot be read: {exc.strerror}", parameter="ca_bundle"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise SandboxConfigError(
            f"ca_bundle {shown!r} is not a regular file: give a PEM file of CA certificates",
            parameter="ca_bundle",
        )
    if info.st_size > CA_BUNDLE_CEILING_BYTES:
        raise SandboxConfigError(
            f"ca_bundle {shown!r} has {info.st_size:,} bytes, more than a CA bundle"
            f" ({CA_BUNDLE_CEILING_BYTES // 2**20} MiB at most)",
            parameter="ca_bundle",
        )
    try:
        data = file.read_bytes()[: CA_BUNDLE_CEILING_BYTES + 1]
    except OSError as exc:
        raise SandboxConfigError(
            f"ca_bundle {shown!r} cannot be read: {exc.strerror}", parameter="ca_bundle"
        ) from None
    if _PEM_CERTIFICATE not in data or len(data) > CA_BUNDLE_CEILING_BYTES:
        raise SandboxConfigError(
            f"ca_bundle {shown!r} holds no PEM certificate (-----BEGIN CERTIFICATE-----):"
            " convert a DER file with `openssl x509 -inform der -in CA.der -out CA.pem`",
            parameter="ca_bundle",
        )
    return data


def host_bundle_note() -> str:
    """`` (the host's: PATH)``, the bundle the host's own pip trusts, or nothing: where the
    host reaches HTTPS through an intercepting proxy, that file holds the proxy's CA."""
    host = ca_bundle()
    return f" (the host's: {host})" if host is not None else ""


UNTRUSTED = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSL certificate problem"
    r"|invalid peer certificate|UnknownIssuer|self[- ]signed certificate in certificate chain"
)
"""How Python's ``ssl``, pip, requests, curl and uv say a server's certificate is signed by
no CA they trust: what an intercepting (TLS-inspecting) network's re-signed HTTPS looks like."""
CA_HINT = "ca_bundle=PATH"


def untrusted_advice(given: Path | None, who: str) -> tuple[str, str, str]:
    """`Sandbox._advice`'s triple for an HTTPS certificate ``who`` (the code, the build) did
    not trust: how to pass the network's CA, or, with a bundle given, that it lacks the CA."""
    if given is not None:
        sentence = (
            f"; {who} did not trust a server's certificate although ca_bundle={str(given)!r}"
            " was given: that bundle holds no CA that signed it (the network's CA, or the"
            " server's own)"
        )
        return sentence, "", ""
    sentence = (
        f"; {who} does not trust the network's CA (an intercepting proxy re-signs HTTPS, or"
        " the server's CA is private): pass a PEM bundle that holds it"
        f"{host_bundle_note()} with {CA_HINT}"
    )
    return sentence, "ca_bundle", CA_HINT


def _remote(urls: str) -> list[str]:
    """Keep only URLs a container can reach (``file://`` paths exist on the host only)."""
    return [u for u in urls.split() if u.startswith(("http://", "https://"))]


def index_settings() -> dict[str, str]:
    """uv index settings equivalent to the host's pip/uv ones (empty: uv's default, PyPI)."""
    pip = _pip_config()
    primary = _remote(
        os.environ.get("UV_INDEX_URL")
        or os.environ.get("PIP_INDEX_URL")
        or pip.get("index-url", "")
    )
    extra = _remote(
        os.environ.get("UV_EXTRA_INDEX_URL")
        or os.environ.get("PIP_EXTRA_INDEX_URL")
        or pip.get("extra-index-url", "")
    )
    settings: dict[str, str] = {}
    if primary:
        settings["UV_INDEX_URL"] = primary[0]
        settings["PIP_INDEX_URL"] = primary[0]
    if extra:
        settings["UV_EXTRA_INDEX_URL"] = " ".join(extra)
        settings["PIP_EXTRA_INDEX_URL"] = " ".join(extra)
    return settings


def debian_mirror() -> str:
    """The host's Debian mirror (from its apt sources), so debootstrap uses what apt uses."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        if not source.is_file():
            continue
        for line in source.read_text(errors="replace").splitlines():
            words = line.split()
            urls = (
                words[1:] if words[:1] == ["URIs:"] else words[1:2] if words[:1] == ["deb"] else []
            )
            for url in urls:
                if url.rstrip("/").endswith("/debian"):
                    return url
    return "http://deb.debian.org/debian"
