"""What a build borrows from the host: its CA bundle and its package-index settings.

A host behind a TLS-inspecting proxy (as many corporate ones are) builds only when the installs
inside a build trust the host's CA bundle. Only these settings cross into a build, as
build arguments that never reach the final image's environment; nothing else from the host
environment enters a build or a run.
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path

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
