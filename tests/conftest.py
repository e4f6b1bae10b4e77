"""Shared fixtures. Engines run for real here: real Monty workers, a real IPython shell."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_sandbox.orchestration import registry


@pytest.fixture(scope="session", autouse=True)
def store_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every ``%%orchestrate`` cell is kept in the durable store: the tests' cells (and the
    kernels and notebooks they start, which inherit it) keep theirs in a temporary folder,
    never in the user's ``~/.local/share/jupyter-sandbox``."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("store")
        patch.setenv("JUPYTER_SANDBOX_STORE", str(folder / "store.sqlite"))
        yield


@pytest.fixture(autouse=True)
def forget_returned_secrets() -> Iterator[None]:
    """A secret a sandbox tool returned is masked in every later run of the process (a
    kernel's life, `_scrub`); each test is such a life of its own, or one test's
    short secret (``"tool"``) masks that word in every later test's output."""
    yield
    from jupyter_sandbox import _scrub

    _scrub._returned.clear()


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A real IPython shell with the extension loaded; tools registered by a test are removed."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_sandbox")
    before = set(registry)
    yield ip
    for name in set(registry) - before:
        registry.unregister(name)


@pytest.fixture(scope="session")
def docker_engine() -> object:
    """The Docker client. No engine is a failure, not a skip: the README's test command starts
    one, and a suite that silently skips its Docker half proves nothing."""
    from jupyter_sandbox import DockerUnavailable
    from jupyter_sandbox.sandbox._client import client

    try:
        return client()
    except DockerUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def no_leaked_containers(docker_engine) -> Iterator[None]:
    """Fail a test that leaves a sandbox container behind (and remove what it left).

    Only this process' containers count: other sessions may be running sandboxes meanwhile."""
    import contextlib
    import os

    import docker.errors

    from jupyter_sandbox.sandbox._pool import settle

    def ours() -> set[str]:
        labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={os.getpid()}"]
        found = docker_engine.api.containers(all=True, filters={"label": labels})
        return {c["Id"] for c in found}  # the list call only: containers may vanish meanwhile

    before = ours()
    yield
    settle()  # background removals done, spare containers removed
    leaked = ours() - before
    for container_id in leaked:
        with contextlib.suppress(docker.errors.NotFound):
            docker_engine.containers.get(container_id).remove(force=True)
    assert not leaked, f"containers left behind: {leaked}"


def _runsc_sandboxes() -> set[str]:
    """Ids of every sandbox runsc keeps for Docker (``runsc --root ... list``), seen or not by
    ``docker ps``. Empty where runsc or its state is not readable (not root)."""
    import shutil
    import subprocess
    from pathlib import Path

    from jupyter_sandbox.sandbox._isolation import STATE_ROOTS

    runsc = shutil.which("runsc")
    ids: set[str] = set()
    for root in (d for r in STATE_ROOTS for d in Path(r).glob("runtime-*/moby")):
        if runsc is not None:
            command = [runsc, "--root", str(root), "list", "-quiet"]
            listed = subprocess.run(command, capture_output=True, text=True, env={})
            ids |= set(listed.stdout.split())
    return ids


@pytest.fixture(params=["container", "gvisor"])
def isolation(request, monkeypatch, docker_engine) -> Iterator[str]:
    """Run the test once per isolation level (`jupyter_sandbox.sandbox._isolation`), through
    ``$JUPYTER_SANDBOX_ISOLATION``: every sandbox the test defines without naming a level, and
    every kernel it starts, uses it. Under gVisor the test also fails if it leaves a runsc
    sandbox behind that the engine no longer lists (which is then deleted)."""
    from jupyter_sandbox.sandbox._isolation import ISOLATION_ENV, purge
    from jupyter_sandbox.sandbox._pool import settle

    monkeypatch.setenv(ISOLATION_ENV, request.param)
    if request.param != "gvisor":
        yield request.param
        return
    before = _runsc_sandboxes()
    yield request.param
    settle()
    listed = _runsc_sandboxes()
    engine = {c["Id"] for c in docker_engine.api.containers(all=True)}
    # in both lists around the engine's: not a container another session starts or removes
    left = (listed & _runsc_sandboxes()) - before - engine
    for sandbox_id in left:
        purge(sandbox_id)
    assert not left, f"runsc sandboxes left behind: {left}"


@pytest.fixture
def tmp_home() -> Iterator[Path]:
    """A temporary folder for a JupyterLab server's root and config (browser tests). Not
    tmp_path: concurrent pytest sessions rotate it away during a long test."""
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        yield Path(tmp)


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by playwright (browser tests)."""
    playwright = pytest.importorskip("playwright.sync_api")
    from _jupyterlab import CHROMIUM

    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()
