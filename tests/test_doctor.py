"""``python -m jupyter_sandbox doctor`` and ``%sandbox_doctor``: every check against the real
thing (this machine's engine, store folders made bad on purpose, a real non-root user).

The CLI runs in a subprocess as a user would run it; single checks run in-process where a
setting is easier to bend there. The non-root runs use Debian's Python (root's own sits in a
folder only root reads) in a venv that borrows this checkout's packages, run by ``runuser``
with nothing of root's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jupyter_sandbox
from jupyter_sandbox import __version__, _doctor
from jupyter_sandbox._doctor import Check, report, run_checks

ROOT = Path(__file__).resolve().parent.parent
ABSENT = "jupyter-sandbox/absent:doctor-test"
NO_ENGINE = "unix:///nonexistent/docker.sock"


def doctor(*args: str, **env: str) -> tuple[int, dict[str, str]]:
    """Run the CLI; its exit status and each check's line by name (state first)."""
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_sandbox", "doctor", *args],
        capture_output=True,
        text=True,
        env=os.environ | env,
        check=False,
        timeout=60,
    )
    assert not done.stderr, done.stderr
    return done.returncode, lines(done.stdout)


def lines(output: str) -> dict[str, str]:
    """``{"engine": "ok    engine  Docker ...", ...}`` from the report (summary left out)."""
    names = ("engine access", "engine", "base image", "gvisor", "store", "pydantic-monty")
    names += ("confinement", "labextension", "kernelspec")
    found = {}
    for line in output.splitlines()[:-1]:
        name = next(n for n in names if line[6:].startswith(n + " "))
        found[name] = line
    assert len(found) == len(names), output
    return found


def state(line: str) -> str:
    return line.split()[0]


# --- as root, on this machine ---


@pytest.mark.docker
def test_this_machine_passes_every_required_check_in_a_few_seconds():
    started = time.monotonic()
    code, checks = doctor()
    took = time.monotonic() - started
    assert code == 0, checks
    for name in ("engine", "engine access", "base image", "store", "pydantic-monty"):
        assert state(checks[name]) == "ok", checks[name]
    assert checks["engine"].startswith("ok    engine          Docker ")
    assert "(API 1." in checks["engine"]
    assert "own-uid+pidns+netns" in checks["confinement"]  # root, here
    assert "runsc registered" in checks["gvisor"]
    assert took < 15, f"doctor took {took:.1f} s"  # ~2 s idle; generous for shared cores


def test_a_failed_check_says_its_fix_on_its_own_line_and_the_summary_names_required_ones():
    checks = [
        Check("engine", "ok", "Docker"),
        Check("base image", "fail", "x is not on the engine", "build it"),
        Check("gvisor", "warn", "runsc is missing", "register it", required=False),
    ]
    shown = list(report(checks))
    assert shown[0] == "ok    engine      Docker"
    assert shown[1] == "FAIL  base image  x is not on the engine; fix: build it"
    assert shown[2] == "warn  gvisor      runsc is missing; fix: register it"
    assert shown[3] == (
        "1 ok, 1 warn, 1 fail (required: engine, base image; a failed one makes the exit status 1)"
    )


def test_engine_down_fails_with_how_to_start_it_and_skips_what_needs_it():
    code, checks = doctor(DOCKER_HOST=NO_ENGINE)
    assert code == 1
    assert checks["engine"].startswith("FAIL  engine ")
    assert f"no engine answers at {NO_ENGINE}: No such file or directory" in checks["engine"]
    assert "fix: unset DOCKER_HOST" in checks["engine"]
    assert "systemctl start docker" in checks["engine"]
    for name in ("engine access", "base image", "gvisor"):
        assert state(checks[name]) == "skip", checks[name]
    assert state(checks["pydantic-monty"]) == "ok"  # the rest is still asked


def test_an_engine_that_never_answers_is_given_up_on_in_seconds(tmp_path: Path):
    """A wedged engine (the socket accepts, nothing answers) must not hang the doctor."""
    path = tmp_path / "wedged.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen(8)
        started = time.monotonic()
        code, checks = doctor(DOCKER_HOST=f"unix://{path}")
        took = time.monotonic() - started
    assert code == 1
    assert checks["engine"].startswith(
        f"FAIL  engine          no engine answers at unix://{path}: no answer within "
        f"{_doctor.ENGINE_TIMEOUT} s; fix: "
    ), checks["engine"]
    assert took < _doctor.ENGINE_TIMEOUT + 10


class FakeEngine:
    """A Docker-API engine on a unix socket the test made: ``answers`` maps a path to the JSON
    it answers; ``trickle``: every answer comes one byte a second, forever (a wedged or
    hostile engine that a per-read timeout never gives up on)."""

    def __init__(self, path: Path, answers: dict[str, Any], *, trickle: bool = False) -> None:
        self.path = path
        self.url = f"unix://{self.path}"
        self.answers, self.trickle = answers, trickle
        self.stop = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(self.path))
        self.listener.listen(8)
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed by `close`
                return
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the doctor hung up
            request = b""
            while b"\r\n\r\n" not in request and (chunk := conn.recv(4096)):
                request += chunk
            path = request.split(b" ")[1].decode() if request.count(b" ") >= 2 else ""
            path = re.sub(r"^/v\d+\.\d+/", "/", path)  # any API version, as the engines
            found = self.answers.get(path, {"message": "no such"})
            text = isinstance(found, str)  # ``/_ping``'s OK
            body = found.encode() if text else json.dumps(found).encode()
            status = b"200 OK" if path in self.answers else b"404 Not Found"
            kind = b"text/plain" if text else b"application/json"
            answer = b"HTTP/1.0 %s\r\nContent-Type: %s\r\n" % (status, kind)
            answer += b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            if not self.trickle:
                conn.sendall(answer)
                return
            for byte in answer:
                if self.stop.wait(1):
                    return
                conn.sendall(bytes([byte]))

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(10)


@pytest.fixture
def fake_engine(tmp_path: Path) -> Iterator[Callable[..., FakeEngine]]:
    made: list[FakeEngine] = []

    def make(answers: dict[str, Any], *, trickle: bool = False) -> FakeEngine:
        made.append(FakeEngine(tmp_path / f"engine{len(made)}.sock", answers, trickle=trickle))
        return made[-1]

    yield make
    for engine in made:
        engine.close()


PODMAN_VERSION = {
    "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}],
    "Version": "4.3.1",
    "ApiVersion": "1.41",
}
"""Rootless Podman 4.3.1's ``/version`` on this host (Debian 12): the keys the doctor reads."""


PODMAN = {
    "/_ping": "OK",  # what the SDK asks first (the doctor asks /version)
    "/version": PODMAN_VERSION,
    "/info": {"SecurityOptions": ["name=seccomp,profile=default"], "Runtimes": {"crun": {}}},
}
"""Rootless Podman's answers but ``/libpod/info`` (its ``/info`` does not say rootless)."""


def podman_libpod_info(cgroup: str, controllers: list[str]) -> dict[str, Any]:
    """Its ``/libpod/info``, the keys the doctor reads as Podman 4.3.1 names them, for a host
    of ``cgroup`` version (``v1``: Podman lists no controllers) and delegated ``controllers``."""
    security = {"rootless": True, "seccompEnabled": True, "selinuxEnabled": False}
    host = {"cgroupManager": "cgroupfs", "cgroupVersion": cgroup, "security": security}
    return {"host": host | {"cgroupControllers": controllers}, "version": {"Version": "4.3.1"}}


def test_an_engine_that_trickles_its_answer_is_given_up_on_in_one_line(
    fake_engine: Callable[..., FakeEngine],
):
    """One byte a second never lets a per-read timeout fire: the deadline is the answer's."""
    engine = fake_engine(PODMAN, trickle=True)
    code, checks = doctor(DOCKER_HOST=engine.url)
    assert code == 1
    assert checks["engine"].startswith(
        f"FAIL  engine          no engine answers at {engine.url}: no whole answer within "
        f"{_doctor.ENGINE_TIMEOUT} s ("
    ), checks["engine"]
    assert checks["engine"].endswith(
        f"; fix: unset DOCKER_HOST (it names {engine.url}), or {_doctor.RESTART_ENGINE}"
    )
    for name in ("base image", "gvisor"):
        assert state(checks[name]) == "skip", checks[name]


def test_an_engine_answer_past_the_cap_is_not_read(fake_engine: Callable[..., FakeEngine]):
    huge = PODMAN_VERSION | {"Padding": "x" * (_doctor.ANSWER_BYTES + 1)}
    engine = fake_engine(PODMAN | {"/version": huge})
    code, checks = doctor(DOCKER_HOST=engine.url)
    assert code == 1
    cap = f"{_doctor.ANSWER_BYTES // 1024:,} KB"
    assert checks["engine"].startswith(
        f"FAIL  engine          no engine answers at {engine.url}: an answer of more than {cap}:"
        " not a Docker-API engine; fix: "
    ), checks["engine"]


def test_a_tls_engine_is_not_asked_in_plain_text(monkeypatch: pytest.MonkeyPatch):
    """The doctor's requests are plain HTTP: to a TLS engine it says so, in one line, rather
    than read the handshake as a garbled answer (nothing listens there: nothing is asked)."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    check = _doctor.check_engine(*_doctor._connect())
    assert (check.state, check.detail) == (
        "fail",
        "no engine answers at tcp://127.0.0.1:9: the doctor asks no TLS engine: `docker info` "
        "checks this one",
    )


def test_rootless_podman_on_cgroup_v1_is_not_usable(
    fake_engine: Callable[..., FakeEngine], monkeypatch: pytest.MonkeyPatch
):
    """It would drop every limit a container is started with, so every run is refused."""
    engine = fake_engine(PODMAN | {"/libpod/info": podman_libpod_info("v1", [])})
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    monkeypatch.delenv("JUPYTER_SANDBOX_UNENFORCED_LIMITS", raising=False)
    check = _doctor.check_engine(*_doctor._connect())
    assert check.state == "fail"
    assert check.detail == (
        f"Podman 4.3.1 (API 1.41, rootless, cgroup v1) at {engine.url}: not usable: it would "
        "silently drop the memory, pids, cpu limits every container is started with, so every "
        "run is refused"
    )
    assert check.fix.startswith("use a cgroup v2 host with the memory, pids and cpu controllers")
    assert check.fix.endswith(
        "; or accept running without them: JUPYTER_SANDBOX_UNENFORCED_LIMITS=memory,pids,cpu"
    )
    monkeypatch.setenv("JUPYTER_SANDBOX_UNENFORCED_LIMITS", "memory,pids,cpu")
    accepted = _doctor.check_engine(*_doctor._connect())
    assert accepted.state == "warn"
    assert "runs go without the memory, pids, cpu limits" in accepted.detail


def test_rootless_podman_on_cgroup_v2_needs_each_controller_delegated(
    fake_engine: Callable[..., FakeEngine], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("JUPYTER_SANDBOX_UNENFORCED_LIMITS", raising=False)
    delegated = podman_libpod_info("v2", ["cpuset", "cpu", "io", "memory", "pids"])
    engine = fake_engine(PODMAN | {"/libpod/info": delegated})
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    check = _doctor.check_engine(*_doctor._connect())
    assert (check.state, check.detail) == (
        "ok",
        f"Podman 4.3.1 (API 1.41, rootless, cgroup v2) at {engine.url}",
    )
    no_cpu = podman_libpod_info("v2", ["memory", "pids"])
    engine = fake_engine(PODMAN | {"/libpod/info": no_cpu})
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    check = _doctor.check_engine(*_doctor._connect())
    assert check.state == "fail"
    assert "it would silently drop the cpu limits" in check.detail


@pytest.mark.docker
def test_the_real_rootless_podman_is_judged_as_its_runs_judge_it(
    podman_engine: Any, monkeypatch: pytest.MonkeyPatch
):
    """The doctor's verdict is the one `require_limits` gives every run on this engine (here,
    cgroup v1: not usable)."""
    from jupyter_sandbox.sandbox import _client, _engine

    monkeypatch.delenv(_engine.UNENFORCED_ENV, raising=False)
    code, checks = doctor(DOCKER_HOST=podman_engine.socket)
    engine = _client.engine_of(_client._connect(podman_engine.socket))
    assert checks["engine"].startswith(
        f"{'FAIL' if engine.unenforced else 'ok  '}  engine          Podman "
    ), checks["engine"]
    assert f"cgroup v{engine.cgroup_version}) at {podman_engine.socket}" in checks["engine"]
    if engine.unenforced:
        assert code == 1
        assert f"drop the {', '.join(engine.unenforced)} limits" in checks["engine"]
        assert "so every run is refused; fix: " in checks["engine"]


@pytest.mark.docker
def test_a_missing_base_image_fails_with_the_way_to_get_it():
    code, checks = doctor("--base-image", ABSENT)
    assert code == 1
    assert checks["base image"] == (
        f"FAIL  base image      {ABSENT} is not on the engine; fix: `docker pull {ABSENT}` (or "
        "build or load it), or change the base image setting (default: "
        "jupyter-sandbox/base:bookworm)"
    )
    code, checks = doctor(JUPYTER_SANDBOX_BASE_IMAGE=ABSENT)
    assert code == 1
    assert "or change $JUPYTER_SANDBOX_BASE_IMAGE" in checks["base image"]


@pytest.mark.docker
def test_the_default_base_image_missing_says_to_build_it(monkeypatch: pytest.MonkeyPatch):
    """The default tag is ours to build (no registry has it): the fix is our command."""
    # patched where the doctor reads it: the sandbox package's front door
    monkeypatch.setattr("jupyter_sandbox.sandbox.DEFAULT_BASE_IMAGE", ABSENT)
    monkeypatch.setenv("JUPYTER_SANDBOX_BASE_IMAGE", ABSENT)
    probe, _ = _doctor._connect()
    assert probe is not None
    check = _doctor.check_base_image(probe, None)
    assert check.state == "fail"
    assert check.fix == "as root, once per engine: `python -m jupyter_sandbox base-image`"


@pytest.mark.docker
def test_gvisor_is_optional_unless_it_is_the_default_level(monkeypatch: pytest.MonkeyPatch):
    class NoRunsc:
        def info(self) -> dict[str, Any]:
            return {"Runtimes": {"runc": {"path": "runc"}}}

    missing = _doctor.check_gvisor(NoRunsc(), None)  # type: ignore[arg-type]
    assert (missing.state, missing.required) == ("warn", False)
    assert "/etc/docker/daemon.json" in missing.fix
    monkeypatch.setenv("JUPYTER_SANDBOX_ISOLATION", "gvisor")
    needed = _doctor.check_gvisor(NoRunsc(), None)  # type: ignore[arg-type]
    assert (needed.state, needed.required) == ("fail", True)
    assert "the default isolation is gvisor" in needed.detail
    monkeypatch.setenv("JUPYTER_SANDBOX_ISOLATION", "vm")
    assert _doctor.check_gvisor(NoRunsc(), None).state == "fail"  # type: ignore[arg-type]


# --- the store: the store's own rules ---


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir(mode=0o700)
    return folder


def test_a_store_not_made_yet_is_fine_where_its_folder_can_be_made(tmp_path: Path):
    check = _doctor.check_store(tmp_path / "new" / "store.sqlite")
    assert check.state == "ok"
    assert "not made yet" in check.detail


def test_a_store_the_store_itself_opened_passes(store_dir: Path):
    from jupyter_sandbox.orchestration.durable._store import Store

    Store(store_dir / "store.sqlite").close()
    check = _doctor.check_store(store_dir / "store.sqlite")
    assert (check.state, check.detail) == ("ok", f"{store_dir}/store.sqlite (folder 0700)")


def test_a_world_writable_store_folder_fails_with_chmod(store_dir: Path):
    store_dir.chmod(0o777)
    code, checks = doctor(JUPYTER_SANDBOX_STORE=str(store_dir / "store.sqlite"))
    assert code == 1
    assert checks["store"].startswith(f"FAIL  store           the store's folder {store_dir} ")
    assert "writable by others" in checks["store"]
    assert checks["store"].endswith(f"; fix: chmod go-w {store_dir}")


def test_a_store_folder_that_links_to_a_shared_folder_fails(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = tmp_path / "link"
    link.symlink_to(shared)
    check = _doctor.check_store(link / "store.sqlite")
    assert check.state == "fail"
    assert "writable by others" in check.detail
    assert check.fix.startswith(f"replace the link {link} (to {shared}) by `mkdir -m 700`")


def test_a_group_writable_store_folder_is_a_warning(store_dir: Path):
    """The store accepts it (only others' write is refused); the group may plant files."""
    store_dir.chmod(0o770)
    check = _doctor.check_store(store_dir / "store.sqlite")
    assert check.state == "warn"
    assert check.fix == f"chmod g-w {store_dir}"


def test_a_store_file_that_is_a_link_fails_with_the_setting_that_follows_it(store_dir: Path):
    real = store_dir / "real.sqlite"
    real.touch(mode=0o600)
    (store_dir / "store.sqlite").symlink_to(real)
    check = _doctor.check_store(store_dir / "store.sqlite")
    assert check.state == "fail"
    assert "not a regular file" in check.detail
    assert check.fix.startswith(f"export JUPYTER_SANDBOX_STORE={real} ")


def test_store_files_others_can_read_or_the_wrong_key_fail(store_dir: Path):
    store = store_dir / "store.sqlite"
    store.touch(mode=0o644)
    check = _doctor.check_store(store)
    assert (check.state, check.fix) == ("fail", f"chmod 600 {store}")
    store.chmod(0o600)
    key = store_dir / "key"
    key.write_bytes(b"short")
    key.chmod(0o600)
    check = _doctor.check_store(store)
    assert check.state == "fail"
    assert "holds 5 bytes, not 32" in check.detail
    assert check.fix.startswith(f"rm {key} (what it sealed can then no longer be loaded)")


def test_a_store_path_that_is_a_folder_is_never_to_be_removed(store_dir: Path):
    check = _doctor.check_store(store_dir)
    assert check.state == "fail"
    assert not check.fix.startswith("rm"), check.fix


def test_an_empty_store_setting_is_no_store():
    assert _doctor.check_store("").state == "ok"


# --- the Python side ---


def test_a_monty_other_than_the_pinned_one_fails(monkeypatch: pytest.MonkeyPatch):
    real = _doctor.importlib.metadata.version

    def version(name: str) -> str:
        return "1.3.9" if name == "pydantic-monty" else real(name)

    monkeypatch.setattr(_doctor.importlib.metadata, "version", version)
    check = _doctor.check_monty()
    assert check.state == "fail"
    assert check.detail == "1.3.9 installed, jupyter-sandbox needs pydantic-monty==1.4.0"
    assert check.fix == "pip install 'pydantic-monty==1.4.0'"


def test_the_labextension_found_and_disabled_as_jupyterlab_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    enabled = _doctor.check_labextension()
    assert enabled.state == "ok", enabled
    listed = subprocess.run(
        [Path(sys.executable).parent / "jupyter", "labextension", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"jupyter-sandbox v{__version__} \x1b[32menabled" in listed.stdout + listed.stderr
    (tmp_path / "labconfig").mkdir()
    (tmp_path / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"jupyter-sandbox": True}})
    )
    disabled = _doctor.check_labextension()
    assert (disabled.state, disabled.fix) == ("warn", "jupyter labextension enable jupyter-sandbox")


def test_the_kernelspec_is_found_once_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from jupyter_sandbox._kernelspec import install_kernel

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "empty-prefix"))
    # and the paths Jupyter worked out at import: a kernelspec installed in this checkout's
    # venv (the README's first command does) or system-wide would be found there
    import site

    import jupyter_core.paths

    monkeypatch.setattr(jupyter_core.paths, "ENV_JUPYTER_PATH", [f"{sys.prefix}/share/jupyter"])
    monkeypatch.setattr(jupyter_core.paths, "SYSTEM_JUPYTER_PATH", [])
    monkeypatch.setattr(site, "ENABLE_USER_SITE", False)
    missing = _doctor.check_kernelspec()
    assert (missing.state, missing.required) == ("warn", False)
    assert missing.fix == f"{sys.executable} -m jupyter_sandbox install-kernel"
    install_kernel(prefix=str(tmp_path))
    found = _doctor.check_kernelspec()
    assert found.state == "ok"
    assert f"{tmp_path}/share/jupyter/kernels/jupyter-sandbox" in found.detail


def test_a_check_that_breaks_is_a_failed_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch):
    def broken() -> Check:
        raise RuntimeError("odd host")

    monkeypatch.setattr(_doctor, "check_monty", broken)
    checks = {c.name: c for c in run_checks()}
    assert checks["pydantic-monty"].state == "fail"
    assert "the check itself failed: RuntimeError: odd host" in checks["pydantic-monty"].detail


@pytest.mark.docker
def test_the_magic_checks_with_the_kernels_settings(shell: Any, capsys: pytest.CaptureFixture[str]):
    shell.run_line_magic("config", f'SandboxMagics.base_image = "{ABSENT}"')
    shell.run_line_magic("config", 'OrchestrateMagics.store = ""')
    try:
        shell.run_line_magic("sandbox_doctor", "")
    finally:
        shell.run_line_magic("config", 'SandboxMagics.base_image = ""')
        shell.run_line_magic("config", "OrchestrateMagics.store = None")
    checks = lines(capsys.readouterr().out)
    shell.run_line_magic("sandbox_doctor", "--help")
    assert "%sandbox_doctor [-h]" in capsys.readouterr().out
    assert checks["base image"].startswith(f"FAIL  base image      {ABSENT} is not on the engine")
    assert checks["store"] == "ok    store           off (%config OrchestrateMagics.store is empty)"
    assert state(checks["engine"]) == "ok"


# --- as a user who is not root ---

IN_DOCKER = "jupyter-sandbox-doctor"
NOT_IN_DOCKER = "jupyter-sandbox-doctor-nogroup"
DEBIAN_PYTHON = "/usr/bin/python3"


def scratch() -> Path:
    """A folder in /tmp the users can reach (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="jupyter-sandbox-doctor-"))
    folder.chmod(0o755)
    return folder


@pytest.fixture
def home() -> Iterator[Path]:
    folder = scratch()
    (folder / "home").mkdir()
    yield folder / "home"
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def user_python() -> Iterator[Path]:
    """Debian's Python in a venv that reads this checkout's packages (same minor version),
    and the two users: one in the ``docker`` group, one not."""
    if os.geteuid() != 0:
        pytest.fail("creating the test users needs root (the README's test command runs as root)")
    for name, groups in ((IN_DOCKER, ["--groups", "docker"]), (NOT_IN_DOCKER, [])):
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", *groups, name], check=True)
    venv = scratch()
    subprocess.run([DEBIAN_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    (python_lib,) = (venv / "lib").glob("python3*")
    ours = Path(sys.prefix) / "lib" / python_lib.name / "site-packages"
    (python_lib / "site-packages" / "checkout.pth").write_text(
        f"import site; site.addsitedir({str(ours)!r})\n"
    )
    opened = _open_to_others(ours, Path(jupyter_sandbox.__file__).parent.parent)
    try:
        yield venv / "bin" / "python"
    finally:
        for folder, mode in opened:
            folder.chmod(mode)
        shutil.rmtree(venv)


def _open_to_others(site_packages: Path, checkout: Path) -> list[tuple[Path, int]]:
    """Let other users reach this checkout's packages for the test, as CI's clone in a
    ``mktemp -d`` (0700) does not: every folder above them searchable, and the editable
    install's folder readable too (Python lists a folder on ``sys.path`` before it finds a
    module in it: searchable alone, ``import jupyter_sandbox`` failed). The modes changed, to
    put back."""
    wanted = {folder: stat.S_IXOTH for folder in [*site_packages.parents, *checkout.parents]}
    wanted[checkout] = stat.S_IXOTH | stat.S_IROTH
    opened = []
    for folder, bits in wanted.items():
        mode = stat.S_IMODE(folder.stat().st_mode)
        if mode & bits != bits:
            opened.append((folder, mode))
            folder.chmod(mode | bits)
    return opened


def as_user(
    user: str, python: Path, home: Path, *, stale: bool = False, **env: str
) -> tuple[int, dict[str, str], float]:
    """``python -m jupyter_sandbox doctor`` as ``user`` with only a login's environment;
    ``stale``: in a session without the user's groups, as one started before ``usermod -aG``."""
    entry = pwd.getpwnam(user)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    switch = ["runuser", "-u", user, "--"]
    if stale:
        switch = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}"]
        switch += ["--clear-groups", "--"]
    base = {
        "HOME": str(home),
        # the monty binary: where pip put it (this checkout's venv), on the user's PATH
        "PATH": f"{python.parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    assignments = [f"{k}={v}" for k, v in (base | env).items()]
    argv = [str(python), "-m", "jupyter_sandbox", "doctor"]
    started = time.monotonic()
    done = subprocess.run(
        [*switch, "env", "-i", *assignments, *argv],
        cwd=home,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    took = time.monotonic() - started
    assert not done.stderr, done.stderr
    return done.returncode, lines(done.stdout), took


@pytest.mark.docker
def test_a_user_in_the_docker_group_passes(user_python: Path, home: Path):
    code, checks, took = as_user(IN_DOCKER, user_python, home)
    assert code == 0, checks
    assert checks["engine access"] == "ok    engine access   /var/run/docker.sock (group docker)"
    assert state(checks["base image"]) == "ok"
    assert checks["store"] == (
        f"ok    store           {home}/.local/share/jupyter-sandbox/store.sqlite: not made yet "
        f"({home}/.local/share/jupyter-sandbox will be made 0700)"
    )
    assert "userns+pidns+netns" in checks["confinement"]  # no own uid without root
    assert took < 15


def test_a_user_outside_the_docker_group_is_told_to_join_it(user_python: Path, home: Path):
    code, checks, _ = as_user(NOT_IN_DOCKER, user_python, home)
    assert code == 1
    assert checks["engine access"] == (
        "FAIL  engine access   /var/run/docker.sock is srw-rw---- root:docker; "
        f"{NOT_IN_DOCKER} is not in group docker; fix: as root: "
        f"`usermod -aG docker {NOT_IN_DOCKER}`, then log out and in again"
    )
    assert state(checks["engine"]) == "skip"
    assert state(checks["base image"]) == "skip"


def test_a_session_from_before_joining_the_group_is_told_to_log_in_again(
    user_python: Path, home: Path
):
    code, checks, _ = as_user(IN_DOCKER, user_python, home, stale=True)
    assert code == 1
    assert checks["engine access"].endswith(
        "; you are in group docker, but this session started before you were; fix: log out and "
        "in again (or run `newgrp docker`), then restart Jupyter"
    )


def test_a_user_with_no_engine_and_a_bad_store_folder(user_python: Path, home: Path):
    """A store folder root owns (the store allows it) but the user cannot write to."""
    roots = home.parent / "roots"
    roots.mkdir(mode=0o755)
    code, checks, _ = as_user(
        IN_DOCKER,
        user_python,
        home,
        DOCKER_HOST=NO_ENGINE,
        JUPYTER_SANDBOX_STORE=str(roots / "store.sqlite"),
    )
    assert code == 1
    assert state(checks["engine"]) == "FAIL"
    assert state(checks["engine access"]) == "skip"
    assert checks["store"] == (
        f"FAIL  store           the store's folder {roots} is not writable by you; fix: "
        "export JUPYTER_SANDBOX_STORE=<a folder of your own>/store.sqlite"
    )
