"""Shared fixtures. Engines run for real here: real Monty workers, a real IPython shell.
Fixtures made in `tests/helpers/` modules are imported here, so every test folder has them."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _installed_kernel import kernel, kernel_prefix  # noqa: F401 - the installed kernelspec's kernel
from _second_engine import second_engine  # noqa: F401 - a private dockerd to restart
from _tracing import spans  # noqa: F401 - tracing on, into the process's one exporter
from IPython.core.interactiveshell import InteractiveShell

from jupyter_sandbox.orchestration import ToolRegistry


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
    from jupyter_sandbox._shared import _scrub

    _scrub._returned.clear()


@pytest.fixture
def tool_registry() -> Iterator[ToolRegistry]:
    """A registry of the test's own for ``@tool`` (a copy of the process's, so tools defined
    at import stay found), the process's put back after: a tool one test registers is gone
    for the next, whatever the test did with `registry` meanwhile."""
    from jupyter_sandbox.orchestration import _registry

    fresh = ToolRegistry(_registry.current())
    previous = _registry.install(fresh)
    try:
        yield fresh
    finally:
        _registry.install(previous)


@pytest.fixture
def shell(
    tool_registry: ToolRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> InteractiveShell:
    """A real IPython shell with the extension loaded; the tools its cells register are the
    test's own (`tool_registry`). Its working directory is the test's own folder, as a
    notebook's kernel runs in the notebook's: ``%%sandbox`` links File outputs into
    ``sandbox-outputs/`` there."""
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_sandbox")
    return ip


@pytest.fixture
def runtime() -> Iterator[Any]:
    """A fresh `Runtime` (worker pools, tool loops) for one test, the process's put back and
    the fresh one closed after: a test that counts or breaks workers touches no other's."""
    from jupyter_sandbox.orchestration import _workers

    fresh = _workers.Runtime()
    previous = _workers.install(fresh)
    try:
        yield fresh
    finally:
        _workers.install(previous)
        fresh.close()


@pytest.fixture
def durable_process() -> Iterator[Any]:
    """Fresh durable state (open stores, paused runs' objects) for one test: a kernel
    restart's view of the store, the process's put back after. Its ``forget()`` is a restart
    in the middle of a test (the paused runs' objects gone)."""
    from jupyter_sandbox.orchestration.durable import _durable

    previous = _durable.install(_durable.Process())
    try:
        yield _durable.current()
    finally:
        _durable.install(previous)


@pytest.fixture
def sandbox_pool() -> Iterator[Any]:
    """A fresh container `Pool` (spares, demand, live containers) for one test: one that
    shrinks its bound (``max_spares``) or counts its spares sees no other test's. The fresh
    pool is closed after (its containers removed) and the process's put back, settled."""
    from jupyter_sandbox.sandbox import _pool

    fresh = _pool.Pool()
    previous = _pool.install(fresh)
    previous.settle()  # the test starts with no spare of another pool waiting beside its own
    try:
        yield fresh
    finally:
        _pool.install(previous)
        fresh.close()
        previous.settle()


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

    from jupyter_sandbox.sandbox._client import connect_all
    from jupyter_sandbox.sandbox._pool import settle

    def ours() -> dict[str, Any]:
        """Each engine that answers (Docker's, and Podman's for the ``podman`` variant)."""
        labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={os.getpid()}"]
        found = {}
        for engine in connect_all():
            for c in engine.api.containers(all=True, filters={"label": labels}):
                found[c["Id"]] = engine  # the list call only: containers may vanish meanwhile
        return found

    before = set(ours())
    yield
    settle()  # background removals done, spare containers removed
    leaked = {cid: engine for cid, engine in ours().items() if cid not in before}
    for container_id, engine in leaked.items():
        with contextlib.suppress(docker.errors.NotFound):
            engine.containers.get(container_id).remove(force=True)
    assert not leaked, f"containers left behind: {set(leaked)}"


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


PODMAN_USER = "jsbx-podman"
"""The non-root user whose rootless Podman service the ``podman`` variant runs on."""


class PodmanService:
    """A rootless ``podman system service`` of `PODMAN_USER` (see the ``podman_engine``
    fixture): its socket, and its own ``podman`` command line."""

    def __init__(self, user: str) -> None:
        import pwd

        entry = pwd.getpwnam(user)
        self.user, self.uid, self.home = user, entry.pw_uid, entry.pw_dir
        self.runtime_dir = f"/run/user/{self.uid}"
        self.socket = f"unix://{self.runtime_dir}/podman/podman.sock"
        self.process: Any = None

    def command(self, *argv: str) -> list[str]:
        """``argv`` as this user, with a login's bare environment. Run it from a folder the
        user can enter (``cwd="/"``): from CI's checkout (``mktemp -d``, 0700) podman fails."""
        env = [f"XDG_RUNTIME_DIR={self.runtime_dir}", f"HOME={self.home}", "PATH=/usr/bin:/bin"]
        return ["runuser", "-u", self.user, "--", "env", "-i", *env, *argv]

    def podman(self, *argv: str, **kwargs: Any) -> Any:
        import subprocess

        return subprocess.run(
            self.command("podman", *argv), capture_output=True, text=True, cwd="/", **kwargs
        )

    def start(self) -> None:
        """Start the service, after stopping one of this user's left by a run that was killed
        (its fixture never stopped it): a stale service answers the first tests and then stops
        answering, and they fail with "no Podman answered"."""
        import contextlib
        import os
        import signal
        import subprocess
        import time

        for pid in self._stale():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not self._stale():
                break
            time.sleep(0.1)
        self.process = subprocess.Popen(
            self.command("podman", "system", "service", "--time=0"),
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        path = self.socket.removeprefix("unix://")
        for _ in range(100):
            if Path(path).exists() and self.podman("--remote", "info").returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"podman service of {self.user} did not answer on {path}")

    def _stale(self) -> list[int]:
        """This user's ``podman system service`` processes that no process of this run started
        (another fixture, e.g. a second engine's, may run one of the same user)."""
        import os
        import subprocess

        from _processes import descends_from

        found = subprocess.run(
            ["pgrep", "-u", str(self.uid), "-f", "podman system service"],
            capture_output=True,
            text=True,
        )
        return [
            int(pid) for pid in found.stdout.split() if not descends_from(int(pid), os.getpid())
        ]

    def stop(self) -> None:
        import os
        import signal

        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(30)
        self.process = None


def _provision_podman(user: str) -> PodmanService:
    """The non-root ``user`` with subordinate ids, a runtime folder and overlay storage, as a
    rootless Podman user needs (root makes them: the tests run as root)."""
    import os
    import pwd
    import shutil
    import subprocess

    missing = [b for b in ("podman", "newuidmap", "slirp4netns") if shutil.which(b) is None]
    if missing:
        pytest.fail(f"{missing} missing: apt-get install podman uidmap slirp4netns fuse-overlayfs")
    try:
        pwd.getpwnam(user)
    except KeyError:  # useradd gives it a subuid/subgid range of 65536
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
    service = PodmanService(user)
    for ids in ("/etc/subuid", "/etc/subgid"):
        if not any(line.startswith(f"{user}:") for line in Path(ids).read_text().splitlines()):
            flag = "--add-subuids" if ids.endswith("uid") else "--add-subgids"
            subprocess.run(["usermod", flag, "300000-365535", user], check=True)
    os.makedirs(service.runtime_dir, mode=0o700, exist_ok=True)
    os.chown(service.runtime_dir, service.uid, service.uid)
    config = Path(service.home, ".config/containers")
    if not (config / "storage.conf").exists():  # vfs (Podman's fallback) copies every layer
        config.mkdir(parents=True, exist_ok=True)
        (config / "storage.conf").write_text('[storage]\ndriver = "overlay"\n')
        for folder in (config.parent, config, config / "storage.conf"):
            os.chown(folder, service.uid, service.uid)
    return service


@pytest.fixture(scope="session")
def podman_engine() -> Iterator[PodmanService]:
    """A rootless Podman service as `PODMAN_USER` (non-root), provisioned for the session and
    stopped after it, with the base image built there (once: the user's image store is kept
    between sessions, as Docker keeps its base image). Fails, not skips, when Podman is not
    installed: the ``podman`` variant of the container-side tests must run."""
    from jupyter_sandbox.sandbox import _client, _engine
    from jupyter_sandbox.sandbox._baseimage import build_base_image
    from jupyter_sandbox.sandbox._build import image_exists

    service = _provision_podman(PODMAN_USER)
    service.start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("CONTAINER_HOST", service.socket)
            patch.setenv(_engine.ENGINE_ENV, "podman")
            podman = _client.client()
            if not image_exists(podman, "jupyter-sandbox/base:bookworm"):
                build_base_image(log=lambda _: None)
        yield service
    finally:
        left = service.podman("ps", "-aq", "--filter", "label=jupyter-sandbox.kind=run")
        service.stop()
    assert not left.stdout.split(), f"containers left on rootless Podman: {left.stdout}"


@pytest.fixture
def on_podman(request, monkeypatch) -> Iterator[PodmanService]:
    """Point every sandbox of the test (and every kernel it starts) at the rootless Podman
    service, accepting exactly the limits that engine says it cannot enforce (on a cgroup v1
    host: all of them; the refusal without it is tested in ``tests/sandbox/test_podman.py``)."""
    import os
    import stat

    from jupyter_sandbox.sandbox import _client, _engine
    from jupyter_sandbox.sandbox._pool import settle

    service = request.getfixturevalue("podman_engine")
    # The tests run as root, the engine as its user: it must reach the folders the runs
    # mount, below the test's tmp_path (pytest makes each 0700). Search (x) only, for this
    # test; a kernel run by the engine's own user needs nothing of the kind.
    opened = []
    folder = request.getfixturevalue("tmp_path")
    while folder != folder.parent:
        mode = stat.S_IMODE(folder.stat().st_mode)
        if not mode & stat.S_IXOTH:
            os.chmod(folder, mode | stat.S_IXOTH)
            opened.append((folder, mode))
        folder = folder.parent
    monkeypatch.setenv("CONTAINER_HOST", service.socket)
    monkeypatch.setenv(_engine.ENGINE_ENV, "podman")
    unenforced = _client.engine_of(_client.client()).unenforced
    monkeypatch.setenv(_engine.UNENFORCED_ENV, ",".join(unenforced))
    yield service
    settle()
    for path, mode in opened:
        os.chmod(path, mode)


@pytest.fixture
def limit_holds(monkeypatch) -> Any:
    """``limit_holds("memory")``: True when the engine enforces that limit (`_engine`); else
    it withdraws the ``podman`` variant's acceptance of unenforced limits and returns False,
    so that the test asserts the refusal instead of running a bomb with nothing to stop it."""
    from jupyter_sandbox.sandbox import _client, _engine

    def holds(limit: str) -> bool:
        if limit in _client.engine_of(_client.client()).enforced:
            return True
        monkeypatch.delenv(_engine.UNENFORCED_ENV, raising=False)
        return False

    return holds


@pytest.fixture(params=["container", "gvisor", "podman"])
def isolation(request, monkeypatch, docker_engine) -> Iterator[str]:
    """Run the test once per isolation level (`jupyter_sandbox.sandbox._isolation`), through
    ``$JUPYTER_SANDBOX_ISOLATION``: every sandbox the test defines without naming a level, and
    every kernel it starts, uses it. Under gVisor the test also fails if it leaves a runsc
    sandbox behind that the engine no longer lists (which is then deleted). ``podman`` is
    the ``container`` level on the other engine: rootless Podman run by a non-root user
    (``on_podman``)."""
    from jupyter_sandbox.sandbox._isolation import ISOLATION_ENV, purge
    from jupyter_sandbox.sandbox._pool import settle

    if request.param == "podman":
        request.getfixturevalue("on_podman")
        monkeypatch.setenv(ISOLATION_ENV, "container")
        yield "container"
        return
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
