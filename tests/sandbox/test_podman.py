"""Rootless Podman as the engine (`jupyter_sandbox.sandbox._engine`), run by a non-root user
(``podman_engine`` in ``conftest.py`` provisions it): found when no Docker answers, chosen by
``$JUPYTER_SANDBOX_ENGINE`` or ``%config SandboxMagics.engine``; the base image built there
without a registry; its limits refused when it would drop them, unless accepted; gVisor
refused; its containers confined as the Docker ones are, as far as the engine can.

The attacks and faults of the container side run on it in their own files: the ``podman``
variant of the ``isolation`` fixture.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from jupyter_sandbox import DockerUnavailable, SandboxConfigError, create
from jupyter_sandbox.errors import IsolationUnavailable
from jupyter_sandbox.sandbox import _build, _client, _engine
from jupyter_sandbox.sandbox._build import BuildInfo, _Progress

pytestmark = pytest.mark.docker


def _uses_podman() -> bool:
    return _client.engine_of(_client.client()).name == "podman"


def test_auto_finds_podman_when_no_docker_answers(podman_engine, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(_engine, "DOCKER_SOCKET", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("CONTAINER_HOST", podman_engine.socket)
    monkeypatch.setenv(_engine.ENGINE_ENV, "auto")
    engine = _client.engine_of(_client.client())
    assert (engine.name, engine.rootless, engine.owner_uid) == ("podman", True, podman_engine.uid)
    assert engine.url == podman_engine.socket
    monkeypatch.setenv(_engine.ENGINE_ENV, "docker")  # Docker asked for: no fallback
    with pytest.raises(DockerUnavailable, match=r"^no Docker answered at unix:///nonexistent"):
        _client.client()


def test_auto_prefers_docker(podman_engine, monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", podman_engine.socket)
    monkeypatch.delenv(_engine.ENGINE_ENV, raising=False)
    assert _client.engine_of(_client.client()).name == "docker"


def test_config_and_environment_choose_the_engine(shell, podman_engine, monkeypatch, caplog):
    monkeypatch.setenv("CONTAINER_HOST", podman_engine.socket)
    monkeypatch.delenv(_engine.ENGINE_ENV, raising=False)
    try:
        shell.run_line_magic("config", 'SandboxMagics.engine = "podman"')
        assert _uses_podman()
        assert os.environ[_engine.ENGINE_ENV] == "podman"  # kernels and the watchdog follow
        shell.run_line_magic("config", 'SandboxMagics.engine = "docker"')
        assert not _uses_podman()
        shell.run_line_magic("config", 'SandboxMagics.engine = "lxc"')  # the line says so
        assert "the engine must be one of ('auto', 'docker', 'podman'), not 'lxc'" in caplog.text
        assert not _uses_podman()
    finally:  # the shell is every test's: a later %reload_ext applies its config again
        shell.run_line_magic("config", 'SandboxMagics.engine = ""')
        _engine.choose(None)
    monkeypatch.setenv(_engine.ENGINE_ENV, "podman")
    assert _uses_podman()
    monkeypatch.setenv(_engine.ENGINE_ENV, "rkt")
    with pytest.raises(SandboxConfigError, match=r"JUPYTER_SANDBOX_ENGINE"):
        _client.client()


def test_no_podman_service_says_how_to_start_it(monkeypatch):
    monkeypatch.setenv(_engine.ENGINE_ENV, "podman")
    monkeypatch.setenv("CONTAINER_HOST", "unix:///nonexistent/podman.sock")
    with pytest.raises(DockerUnavailable) as info:
        create("x", code="").run()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("no Podman answered at unix:///nonexistent/podman.sock")
    assert "podman system service --time=0" in message


def test_limits_the_engine_would_drop_are_refused_naming_them(on_podman, monkeypatch):
    """On this host (cgroup v1) rootless Podman drops memory, pids and CPU limits: nothing
    runs, unless each one is accepted, and then each run says so."""
    engine = _client.engine_of(_client.client())
    if not engine.unenforced:
        pytest.skip(f"{engine.describe()}: every limit holds here")
    monkeypatch.delenv(_engine.UNENFORCED_ENV)
    before = on_podman.podman("ps", "-aq").stdout.split()
    with pytest.raises(IsolationUnavailable) as info:
        create("t", code="x = 1").run()
    message = str(info.value)
    names = ",".join(engine.unenforced)
    assert f"would silently drop the {names} limit(s), so nothing ran" in message
    assert f"{_engine.UNENFORCED_ENV}={names}" in message
    assert on_podman.podman("ps", "-aq").stdout.split() == before
    monkeypatch.setenv(_engine.UNENFORCED_ENV, "memory")  # not all of them: still refused
    with pytest.raises(IsolationUnavailable):
        create("t", code="x = 1").run()
    monkeypatch.setenv(_engine.UNENFORCED_ENV, names)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert create("t", code="x = 1", outputs={"x": int}).run() == 1
    assert any("not enforced by Podman" in str(w.message) for w in caught)


def test_gvisor_is_refused_on_rootless_podman(on_podman):
    with pytest.raises(IsolationUnavailable, match=r"^isolation 'gvisor' needs Docker: Podman"):
        create("t", code="pass", isolation="gvisor").run()


@pytest.mark.usefixtures("no_leaked_containers")
def test_code_runs_rootless_as_an_unprivileged_user(on_podman):
    """The service is the non-root user's; in the container the code is uid 1000 of a user
    namespace whose ids are that user's subordinate ones (no host root anywhere)."""
    code = (
        "import os\n"
        "uid = os.getuid()\n"
        "uid_map = open('/proc/self/uid_map').read().split()\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
    )
    sandbox = create("who", code=code, outputs={"uid": int, "uid_map": list, "caps": str})
    uid, uid_map, caps = sandbox.run()
    assert uid == 1000
    assert int(caps, 16) == 0
    inside, outside = int(uid_map[0]), int(uid_map[1])
    assert (inside, outside) == (0, on_podman.uid)  # container root is the user, not root
    engine = _client.engine_of(_client.client())
    assert engine.rootless and engine.owner_uid == on_podman.uid != 0
    children = Path(f"/proc/{on_podman.process.pid}/task/{on_podman.process.pid}/children")
    service = [int(pid) for pid in children.read_text().split()]  # runuser's: podman's
    assert [Path(f"/proc/{pid}").stat().st_uid for pid in service] == [on_podman.uid]


def test_the_base_image_was_built_there_without_a_registry(on_podman):
    """``podman_engine`` built it with `build_base_image` (debootstrap, an import, a build
    with no network): it carries our labels and runs Python."""
    podman = _client.client()
    image = podman.images.get("jupyter-sandbox/base:bookworm")
    assert image.labels.get("jupyter-sandbox.kind") == "base"
    assert create("py", code="import sys\nv = sys.version_info[0]", outputs={"v": int}).run() == 3


def test_podman_build_steps_are_read_as_docker_ones():
    events: list[object] = []
    info = BuildInfo(tag="t", cached=False)
    progress = _Progress(info, ["installing x"], events.append)
    for line in ("STEP 1/2: RUN pip install x", "--> 1bf3c9d13de", "Collecting x"):
        progress.line(line)
    progress.fail(
        'error building at STEP "RUN pip install x": while running runtime: exit status 3'
    )
    assert [type(e).__name__ for e in events] == ["BuildStep", "BuildLog"]
    assert (info.total_steps, info.steps) == (2, ["installing x"])
    assert info.failure == "step 1 of 2 (installing x): Collecting x (exit code 3)"
    assert _build._STEP.match("Step 3/4 : COPY a b").group(3, 4, 5) == (None, None, "COPY a b")


def _engine_of(name: str, rootless: bool, enforced: tuple[str, ...]) -> _engine.Engine:
    return _engine.Engine(name, "unix:///x.sock", "1", rootless, "1", frozenset(enforced))  # type: ignore[arg-type]


def test_where_each_choice_looks(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("CONTAINER_HOST", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
    podman = "unix:///run/user/4242/podman/podman.sock"
    assert _engine.candidates("auto") == [_engine.DOCKER_SOCKET, podman]
    assert _engine.candidates("podman") == [podman]
    assert _engine.candidates("docker") == [_engine.DOCKER_SOCKET]
    monkeypatch.setenv("DOCKER_HOST", "tcp://elsewhere:2375")  # set on purpose: only that one
    assert _engine.candidates("auto") == ["tcp://elsewhere:2375"]
    monkeypatch.setenv("CONTAINER_HOST", "unix:///srv/podman.sock")
    assert _engine.candidates("podman") == ["unix:///srv/podman.sock"]


def test_only_unenforced_limits_need_accepting(monkeypatch):
    monkeypatch.delenv(_engine.UNENFORCED_ENV, raising=False)
    _engine.require_limits(_engine_of("docker", False, _engine.LIMITS))  # nothing to refuse
    rootful_podman = _engine_of("podman", False, _engine.LIMITS)
    _engine.require_limits(rootful_podman)
    assert _engine.supports_gvisor(rootful_podman)
    v2 = _engine_of("podman", True, ("memory", "pids"))
    with pytest.raises(IsolationUnavailable, match=r"drop the cpu limit\(s\)"):
        _engine.require_limits(v2)
    monkeypatch.setenv(_engine.UNENFORCED_ENV, "cpu")
    with pytest.warns(RuntimeWarning, match="not enforced by Podman .*: cpu"):
        _engine.require_limits(v2)
    assert _engine.tmpfs_owner(v2, 7) == "U"
    assert _engine.tmpfs_owner(_engine_of("docker", False, ()), 7) == "uid=7,gid=7"
