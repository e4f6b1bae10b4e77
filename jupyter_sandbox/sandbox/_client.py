"""The engine connection (Docker's or Podman's Docker API: `_engine` chooses one) and the
labels that mark what we create.

The ``docker`` SDK is imported here, lazily, so ``import jupyter_sandbox`` stays fast and works
without an engine. Every image and container we create carries ``jupyter-sandbox.*`` labels:
they are how the CLI lists and prunes, and how a new kernel finds containers a dead one left.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from functools import cache
from typing import TYPE_CHECKING, Any

from .._shared._errors import DockerUnavailable
from .._shared._owner import me, parse_token
from ._engine import Engine, candidates, engine_choice, how_to_start, identify

if TYPE_CHECKING:
    from docker import DockerClient

LABEL = "jupyter-sandbox"
KIND = f"{LABEL}.kind"
"""``base``, ``env`` (a built environment image) or ``run`` (a container)."""
OWNER_PID = f"{LABEL}.owner-pid"
OWNER_HOST = f"{LABEL}.owner-host"
OWNER_START = f"{LABEL}.owner-start"
"""The owner's start time and boot (`_owner.Owner.token`): a zombie or a reused pid is no owner."""

_API_TIMEOUT = 900
"""Seconds the SDK waits on one response: a silent ``pip install`` step can take minutes."""
_POOL_SIZE = 128
"""Connections kept per engine URL (the SDK's default is 10). A fan-out of 16 runs, their
spares and refills return more than 10 at once: urllib3 then discards the extra one through
a warning that reads the pool's size and, racing the SDK closing that pool, raised
``AttributeError: 'NoneType' object has no attribute 'qsize'`` into a run."""


_connect_lock = threading.Lock()
"""Serialises the first ``import docker``: the reaper thread started by ``%load_ext`` and the
first cell may both get here, and two threads importing the SDK at once can deadlock on
Python's module locks."""


_engines: dict[int, tuple[DockerClient, Engine]] = {}
"""What each client talks to, by the client's id (the client kept: its id stays its own)."""


@cache
def _connect(url: str) -> DockerClient:
    import docker
    from docker.utils import kwargs_from_env

    # $DOCKER_TLS_VERIFY and $DOCKER_CERT_PATH still apply, as from_env applies them
    settings = kwargs_from_env(environment={**os.environ, "DOCKER_HOST": url})
    client = docker.DockerClient(**settings, timeout=_API_TIMEOUT, max_pool_size=_POOL_SIZE)
    if client.api.base_url.startswith("http+docker://"):  # a local socket (or SSH)
        # no proxy, netrc or CA bundle applies to it: without this, requests reads the
        # whole environment for them on every call (several calls per run)
        client.api.trust_env = False
    client.ping()
    engine = identify(client, url)
    if engine.name == "podman":
        _gone_is_not_found(client)
    _engines[id(client)] = (client, engine)
    return client


_GONE = ("no such container", "no such exec session", "no such object")


def _gone_is_not_found(client: DockerClient) -> None:
    """Podman (4.3) answers 500 for a container that is gone or going (``container <id> does
    not exist in database: no such container``, while its auto-removal runs) where Docker
    answers 404: make it the 404 (``NotFound``) every caller here handles."""
    api = client.api
    raise_for_status = api._raise_for_status

    def podman_raise_for_status(response: Any) -> None:
        if response.status_code == 500 and any(g in response.text for g in _GONE):
            response.status_code = 404
        raise_for_status(response)

    api._raise_for_status = podman_raise_for_status


def _find() -> DockerClient:
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    choice = engine_choice()
    tried = candidates(choice)
    for url in tried:
        try:
            return _connect(url)
        except (DockerException, RequestException, OSError):
            continue
    raise DockerUnavailable(
        f"no {'engine' if choice == 'auto' else choice.capitalize()} answered at "
        f"{' or '.join(tried)}: {how_to_start(choice)}"
    )


def client() -> DockerClient:
    """A connected client of the chosen engine (`_engine`); `DockerUnavailable` (one line, how
    to start one) when none answers.

    Call it before importing anything from ``docker`` elsewhere (see `_connect_lock`).
    """
    with _connect_lock:
        return _find()


def connect_all() -> list[DockerClient]:
    """A client of every engine that answers, Docker's and Podman's (the watchdog's sweep)."""
    found = []
    with _connect_lock:
        from docker.errors import DockerException
        from requests.exceptions import RequestException

        for url in dict.fromkeys(candidates("docker") + candidates("podman")):
            with contextlib.suppress(DockerException, RequestException, OSError):
                found.append(_connect(url))
    return found


def engine_of(docker: DockerClient) -> Engine:
    """What ``docker`` talks to: Docker or Podman, rootless or not, the limits it enforces
    (asked once per client)."""
    with _connect_lock:
        known = _engines.get(id(docker))
        if known is None or known[0] is not docker:
            known = _engines[id(docker)] = (docker, identify(docker, docker.api.base_url))
        return known[1]


def is_engine_error(exc: BaseException) -> bool:
    """True for the SDK's own errors, and for an engine that stopped answering (a restart, a
    crash: the SDK lets the HTTP layer's connection error through). Only asked once `client`
    has imported the SDK."""
    from docker.errors import DockerException
    from requests.exceptions import ConnectionError as EngineGone

    return isinstance(exc, DockerException | EngineGone)


def engine_error_message(exc: BaseException) -> str:
    """One line for an `is_engine_error` exception, saying what to do when the engine left."""
    from requests.exceptions import ConnectionError as EngineGone

    if isinstance(exc, EngineGone):
        where = " or ".join(candidates(engine_choice()))
        return (
            f"the container engine at {where} stopped answering: check it is running, then run"
            " again"
        )
    return f"Docker engine error: {exc}"


def owner_labels() -> dict[str, str]:
    """Labels naming this process, so a later kernel can tell our orphans from live runs."""
    owner = me()
    return {OWNER_PID: str(owner.pid), OWNER_START: owner.token, OWNER_HOST: socket.gethostname()}


def orphaned(labels: dict[str, Any]) -> bool:
    """Whether ``labels`` (`owner_labels` of a container or network) name a process of this
    host that is provably gone: a zombie, or a pid now another process's (see `_owner`).
    Another host's, or unreadable labels: not ours to remove."""
    owner = parse_token(labels.get(OWNER_PID, ""), labels.get(OWNER_START, ""))
    return (
        labels.get(OWNER_HOST) == socket.gethostname() and owner is not None and not owner.alive()
    )
