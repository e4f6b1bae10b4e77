"""``python -m jupyter_sandbox doctor`` and ``%sandbox_doctor``: is this machine set up?

A newcomer whose first ``%%sandbox`` cell fails learns one thing at a time; the doctor asks
everything at once and says, for each problem, the command that fixes it. Each check is a
`Check` (no printing here, no IPython): the CLI and the line magic only format them.

A **required** check that finds a problem is ``fail`` (the exit status is then 1): without it
one of the magics cannot work. An optional one is ``warn`` (gVisor, the JupyterLab extension,
the kernelspec, a weaker worker confinement). ``skip`` marks a check that could not be asked
because one it depends on failed (no image can be looked up without an engine).

Nothing of the user's is created or changed (the confinement check starts a Monty worker, as
the first ``%%orchestrate`` cell would), and the store's database is never opened: closing a
descriptor of a SQLite file drops every lock this process holds on it (see
`orchestration.durable._store`), and in a kernel the store may be open. Its folder, file and key are
looked at with the store's own checks instead.
"""

from __future__ import annotations

import contextlib
import grp
import importlib.metadata
import json
import os
import pwd
import re
import shutil
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import quote

from ._shared._errors import DockerUnavailable, SandboxConfigError, StoreError

State = Literal["ok", "warn", "fail", "skip"]

ENGINE_TIMEOUT = 5
"""Seconds the doctor gives the engine to answer one request, whole (the product waits 900 s
for a build step; a doctor that hangs on a wedged engine helps nobody)."""
ANSWER_BYTES = 4 * 2**20
"""The most the doctor reads of one answer: an engine's ``/info`` is a few KB, an image's
inspect some tens; what sends more is no engine the doctor can judge."""
DEFAULT_SOCKET = "/var/run/docker.sock"
RESTART_ENGINE = (
    "restart the engine as root: `systemctl restart docker` (or stop `dockerd` and start it "
    "again); if something else listens there, point DOCKER_HOST at the engine"
)
START_ENGINE = (
    "start the engine as root: `systemctl start docker` (or `dockerd &` without systemd; "
    "`bash scripts/bootstrap.sh` in a checkout does it)"
)


@dataclass(frozen=True)
class Check:
    """One check's outcome, as one line: ``state name: detail`` and, for a problem, its fix."""

    name: str
    state: State
    detail: str
    fix: str = ""
    """What to run or change; empty when there is nothing to fix (or nothing certain to say)."""
    required: bool = True
    """A required check's problem is ``fail`` (one of the magics cannot work without it)."""


# --- the engine: socket access, reachability, base image, gVisor ---


def _socket_path() -> str | None:
    """The engine's unix socket as the Docker SDK finds it (``$DOCKER_HOST`` or the default);
    None for a remote engine (tcp://, ssh://), whose access is no file permission."""
    host = os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    return host.removeprefix("unix://") if host.startswith("unix://") else None


def _engine_url() -> str:
    return os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"


def check_access(socket_path: str | None) -> Check:
    """Whether this user may use the engine's socket: root, the socket's group (``docker``),
    or a socket of one's own (rootless engines). Being added to the group does nothing to a
    session started before: that case gets its own fix."""
    name = "engine access"
    if socket_path is None:
        return Check(name, "ok", f"remote engine {_engine_url()}: no socket to check")
    try:
        info = os.stat(socket_path)
    except OSError as error:
        return Check(name, "skip", f"no socket at {socket_path} ({error.strerror})")
    if os.geteuid() == 0:
        return Check(name, "ok", f"root ({socket_path})")
    group = _group_name(info.st_gid)
    if os.access(socket_path, os.R_OK | os.W_OK):
        how = "yours" if info.st_uid == os.geteuid() else f"group {group}"
        return Check(name, "ok", f"{socket_path} ({how})")
    user = pwd.getpwuid(os.geteuid()).pw_name
    detail = f"{socket_path} is {stat.filemode(info.st_mode)} {_user_name(info.st_uid)}:{group}"
    if _member(user, info.st_gid):
        return Check(
            name,
            "fail",
            f"{detail}; you are in group {group}, but this session started before you were",
            f"log out and in again (or run `newgrp {group}`), then restart Jupyter",
        )
    return Check(
        name,
        "fail",
        f"{detail}; {user} is not in group {group}",
        f"as root: `usermod -aG {group} {user}`, then log out and in again",
    )


def _member(user: str, gid: int) -> bool:
    try:
        entry = grp.getgrgid(gid)
    except KeyError:
        return False
    return user in entry.gr_mem or pwd.getpwnam(user).pw_gid == gid


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class EngineProbe:
    """The engine's API as the doctor asks it: a few GETs, each on a connection of its own,
    answered whole within `ENGINE_TIMEOUT` seconds and `ANSWER_BYTES` or given up on
    (`DockerUnavailable`, its message one line).

    Not the SDK's client: its timeout is per read, so an engine that sends a byte a second
    (wedged, or hostile) would hold the doctor forever, and it reads an answer of any size.
    Here one deadline covers the whole exchange, kept by a timer that shuts the socket (so
    it also ends a connect or a header that never finishes), and the answer is read to a
    cap. HTTP/1.0: every Docker-API engine then closes the connection after one answer,
    sent whole (never chunked)."""

    def __init__(self, url: str) -> None:
        self.url = url
        """``unix:///path`` or ``tcp://host:port`` (`_engine_url`)."""
        self._answers: dict[str, dict[str, Any]] = {}
        """The answers of ``/version`` and the infos, asked once for every check."""

    def get(self, path: str) -> tuple[int, Any]:
        """The status and the JSON body of ``GET path``."""
        received = bytearray()
        fired = threading.Event()
        with socket.socket(*self._family()) as conn:

            def cut() -> None:
                fired.set()
                with contextlib.suppress(OSError):  # a blocked connect or recv returns
                    conn.shutdown(socket.SHUT_RDWR)

            timer = threading.Timer(ENGINE_TIMEOUT, cut)
            timer.daemon = True
            timer.start()
            try:
                conn.connect(self._address())
                conn.sendall(f"GET {path} HTTP/1.0\r\nHost: engine\r\n\r\n".encode())
                capped = _read_answer(conn, received)
            except OSError as error:
                if not fired.is_set():
                    raise DockerUnavailable(error.strerror or str(error)) from None
            finally:
                timer.cancel()
        if fired.is_set():
            came = f" ({len(received):,} bytes came)" if received else ""
            raise DockerUnavailable(
                f"no {'whole ' if received else ''}answer within {ENGINE_TIMEOUT} s{came}"
            )
        if capped:
            raise DockerUnavailable(
                f"an answer of more than {ANSWER_BYTES // 1024:,} KB: not a Docker-API engine"
            )
        return _parsed(bytes(received))

    def version(self) -> dict[str, Any]:
        return self._ok("/version")

    def info(self) -> dict[str, Any]:
        return self._ok(self._versioned("/info"))

    def libpod_info(self) -> dict[str, Any]:
        return self._ok(self._versioned("/libpod/info"))

    def image(self, name: str) -> dict[str, Any] | None:
        """The image's inspect; None when the engine has no such image."""
        status, body = self.get(self._versioned(f"/images/{quote(name, safe='/:@')}/json"))
        if status == 404:
            return None
        return self._checked("/images/.../json", status, body)

    def _versioned(self, path: str) -> str:
        """``path`` under the API version the engine gave (Podman's ``/libpod`` paths are
        found only under one), as the SDK asks."""
        api = str(self.version().get("ApiVersion", ""))
        return f"/v{api}{path}" if re.fullmatch(r"\d+\.\d+", api) else path

    def _ok(self, path: str) -> dict[str, Any]:
        if path not in self._answers:
            self._answers[path] = self._checked(path, *self.get(path))
        return self._answers[path]

    @staticmethod
    def _checked(path: str, status: int, body: Any) -> dict[str, Any]:
        if status != 200 or not isinstance(body, dict):
            said = body.get("message") if isinstance(body, dict) else None
            raise DockerUnavailable(f"{path} answered {status}: {str(said or body)[:200]}")
        return body

    def _family(self) -> tuple[socket.AddressFamily, socket.SocketKind]:
        address = self._address()
        if isinstance(address, str):
            return socket.AF_UNIX, socket.SOCK_STREAM
        return (socket.AF_INET6 if ":" in address[0] else socket.AF_INET), socket.SOCK_STREAM

    def _address(self) -> str | tuple[str, int]:
        if self.url.startswith("unix://"):
            return self.url.removeprefix("unix://")
        host, _, port = self.url.removeprefix("tcp://").rstrip("/").rpartition(":")
        return (host.strip("[]") or "localhost", int(port or 2375))


_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d+)[ \t]*\r?$")


def _read_answer(conn: socket.socket, into: bytearray) -> bool:
    """Read into ``into`` until the engine closes the connection or has sent the
    ``Content-Length`` it announced; True (and stop) past `ANSWER_BYTES`."""
    length: int | None = None
    start = 0
    while chunk := conn.recv(65536):
        into += chunk
        if len(into) > ANSWER_BYTES:
            return True
        if length is None and (end := into.find(b"\r\n\r\n")) >= 0:
            found = _LENGTH.search(into, 0, end)
            length, start = (int(found.group(1)) if found else -1), end + 4
        if length is not None and 0 <= length <= len(into) - start:
            break
    return False


def _parsed(answer: bytes) -> tuple[int, Any]:
    """An HTTP answer's status and JSON body (`DockerUnavailable` for anything else)."""
    head, ended, body = answer.partition(b"\r\n\r\n")
    status = re.match(rb"HTTP/1\.[01] (\d{3})\b", head)
    found = _LENGTH.search(head)
    if not ended or status is None or (found and len(body) < int(found.group(1))):
        raise DockerUnavailable(
            f"a cut or garbled answer ({len(answer):,} bytes): not a Docker-API engine"
        )
    code = int(status.group(1))
    body = body[: int(found.group(1))] if found else body
    try:
        return code, json.loads(body)
    except ValueError:
        if code != 200:  # an error's text (Podman's 404 is plain text): `_checked` says it
            return code, body[:200].decode(errors="replace").strip()
        raise DockerUnavailable(
            f"an answer that is not JSON ({len(answer):,} bytes): not a Docker-API engine"
        ) from None


def _connect() -> tuple[EngineProbe | None, str]:
    """The engine's probe once it has answered ``/version``, or None and why not (one line)."""
    url = _engine_url()
    if not url.startswith(("unix://", "tcp://")):
        return None, "the doctor asks engines at unix:// or tcp:// only"
    if url.startswith("tcp://") and (
        os.environ.get("DOCKER_TLS_VERIFY") or os.environ.get("DOCKER_CERT_PATH")
    ):  # a plain request would read the TLS handshake as a garbled answer
        return None, "the doctor asks no TLS engine: `docker info` checks this one"
    probe = EngineProbe(url)
    try:
        probe.version()
    except DockerUnavailable as error:
        return None, str(error)
    return probe, ""


def check_engine(probe: EngineProbe | None, why: str) -> Check:
    """Which engine answers (Docker or Podman: the version's components say), its version,
    its API version, and whether runs can work there: an engine that would drop the limits
    every container is started with refuses every run (rootless Podman on cgroup v1), judged
    as the runs judge it (`sandbox.engine_from`)."""
    from .sandbox import UNENFORCED_ENV, engine_from, limits_accepted, limits_fix

    name = "engine"
    if probe is None:
        if why == "Permission denied":
            return Check(name, "skip", f"{_engine_url()}: permission denied (see engine access)")
        fix = RESTART_ENGINE if "answer" in why else START_ENGINE
        if os.environ.get("DOCKER_HOST"):
            fix = f"unset DOCKER_HOST (it names {_engine_url()}), or {fix}"
        return Check(name, "fail", f"no engine answers at {_engine_url()}: {why}", fix)
    version = probe.version()
    engine = engine_from(probe.url, version, probe.info, probe.libpod_info)
    kind = "Podman" if engine.name == "podman" else "Docker"
    rootless = ", rootless" if engine.rootless else ""
    detail = (
        f"{kind} {engine.version} (API {version.get('ApiVersion', '?')}{rootless}, cgroup "
        f"v{engine.cgroup_version}) at {probe.url}"
    )
    if not engine.unenforced:
        return Check(name, "ok", detail)
    names = ", ".join(engine.unenforced)
    if limits_accepted(engine):
        detail += f": runs go without the {names} limits (${UNENFORCED_ENV} accepts it)"
        return Check(name, "warn", detail, limits_fix(engine).partition("; or accept")[0])
    detail += (
        f": not usable: it would silently drop the {names} limits every container is started "
        "with, so every run is refused"
    )
    return Check(name, "fail", detail, limits_fix(engine))


def check_base_image(probe: EngineProbe | None, tag: str | None) -> Check:
    """The image every environment builds on: on the engine now, never pulled or built here."""
    from .sandbox import BASE_IMAGE_ENV, DEFAULT_BASE_IMAGE, default_base_image

    name = "base image"
    image = tag or default_base_image()
    if probe is None:
        return Check(name, "skip", f"{image}: not checked without an engine")
    found = probe.image(image)
    if found is None:
        if image == DEFAULT_BASE_IMAGE:
            fix = "as root, once per engine: `python -m jupyter_sandbox base-image`"
        else:
            source = f"${BASE_IMAGE_ENV}" if not tag else "the base image setting"
            fix = (
                f"`docker pull {image}` (or build or load it), or change {source} "
                f"(default: {DEFAULT_BASE_IMAGE})"
            )
        return Check(name, "fail", f"{image} is not on the engine", fix)
    size = int(found.get("Size") or 0) // 2**20
    short = str(found.get("Id", "?")).removeprefix("sha256:")[:12]
    return Check(name, "ok", f"{image} ({short}, {size} MB)")


def check_gvisor(probe: EngineProbe | None, isolation: str | None) -> Check:
    """gVisor's ``runsc`` registered with the engine: optional, unless gVisor is the level
    runs get by default (``$JUPYTER_SANDBOX_ISOLATION`` or the magic's setting)."""
    from .sandbox import ISOLATION_ENV, REGISTER, RUNTIMES, isolation_level

    name = "gvisor"
    try:
        level = isolation_level(isolation)
    except SandboxConfigError as error:
        return Check(name, "fail", str(error), f"set ${ISOLATION_ENV} to container or gvisor")
    required = level == "gvisor"
    if probe is None:
        return Check(name, "skip", "not checked without an engine", required=required)
    runtimes = probe.info().get("Runtimes") or {}
    runsc = RUNTIMES["gvisor"]
    if runsc in runtimes:
        path = runtimes[runsc].get("path", runsc)
        return Check(
            name, "ok", f"runsc registered ({path}): --isolation gvisor works", "", required
        )
    why = "the default isolation is gvisor" if required else "--isolation gvisor will fail"
    detail = f"runsc is not registered with the engine: {why}"
    return Check(name, "fail" if required else "warn", detail, REGISTER, required)


# --- the durable store ---

OWN_STORE = "export JUPYTER_SANDBOX_STORE=<a folder of your own>/store.sqlite"


def check_store(path: str | os.PathLike[str] | None) -> Check:
    """The store's folder, file and key as `Store` requires them, asked with its own checks,
    without creating anything (a store not made yet is fine where its folder can be made).

    The store refuses a folder others may write to; a group-writable one it accepts, and so do
    we, with a warning (members of that group could plant files beside the store)."""
    from .orchestration import (
        KEY_BYTES,
        check_private_file,
        check_private_folder,
        default_store_path,
    )

    name = "store"
    if path is not None and os.fspath(path) == "":
        return Check(name, "ok", "off (%config OrchestrateMagics.store is empty)")
    store = Path(default_store_path() if path is None else path).expanduser().absolute()
    folder = store.parent
    if not folder.exists():
        existing = next(p for p in folder.parents if p.exists())
        if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
            return Check(name, "ok", f"{store}: not made yet ({folder} will be made 0700)")
        return Check(
            name,
            "fail",
            f"cannot make {folder}: {existing} is not a folder you can write to",
            OWN_STORE,
        )
    try:
        if not folder.is_dir():
            raise StoreError(f"the store's folder {folder} is not a folder")
        check_private_folder(folder)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"the store's folder {folder} is not writable by you")
        for file, what in ((store, "the store"), (folder / "key", "the store's key file")):
            if os.path.lexists(file):
                info = os.lstat(file)
                if not stat.S_ISREG(info.st_mode):
                    raise StoreError(f"{what} {file} is not a regular file (a link, a folder...)")
                check_private_file(file, info, what)
                if what != "the store" and info.st_size != KEY_BYTES:
                    raise StoreError(f"{what} {file} holds {info.st_size} bytes, not {KEY_BYTES}")
    except StoreError as error:
        return Check(name, "fail", str(error), _store_fix(store, str(error)))
    mode = stat.S_IMODE(os.stat(folder).st_mode)
    where = f"{store} (folder {mode:04o}{', a link' if folder.is_symlink() else ''})"
    if mode & stat.S_IWGRP:
        group = _group_name(os.stat(folder).st_gid)
        detail = f"{where}: group {group} may write to the folder and plant files beside the store"
        return Check(name, "warn", detail, f"chmod g-w {folder}")
    made = "" if store.exists() else ": not made yet"
    return Check(name, "ok", where + made)


def _store_fix(store: Path, problem: str) -> str:
    """The command for what the store refused (its message says what, this says how). Only a
    regular file is ever to be removed, and only one the store refused for its content or
    owner; a link to a good file is better followed by the setting than removed."""
    folder = store.parent
    if "store's folder" in problem:
        mine = folder.is_dir() and os.stat(folder).st_uid == os.geteuid()
        if folder.is_symlink():
            target = folder.resolve()
            return f"replace the link {folder} (to {target}) by `mkdir -m 700`, or {OWN_STORE}"
        if mine and "not writable by you" in problem:
            return f"chmod u+wx {folder}"
        return f"chmod go-w {folder}" if mine else OWN_STORE
    file = store if problem.startswith("the store ") else folder / "key"
    if "not a regular file" in problem:
        if file == store and file.is_symlink() and file.resolve().is_file():
            return f"export JUPYTER_SANDBOX_STORE={file.resolve()} (the store opens no link)"
        return f"move {file} away, or {OWN_STORE}"
    if "readable or writable by others" in problem:
        return f"chmod 600 {file}"
    lost = " (what it sealed can then no longer be loaded)" if file != store else ""
    return f"rm {file}{lost}, or {OWN_STORE}"


# --- the Python side: Monty, confinement, JupyterLab, the kernelspec ---


def check_monty() -> Check:
    """pydantic-monty at the version jupyter-sandbox pins: stored runs are sealed with it, and
    Monty's snapshots load only into the version that wrote them."""
    from packaging.requirements import Requirement

    name = "pydantic-monty"
    try:
        installed = importlib.metadata.version("pydantic-monty")
    except importlib.metadata.PackageNotFoundError:
        return Check(name, "fail", "not installed", "pip install jupyter-sandbox")
    wanted = [
        Requirement(line)
        for line in importlib.metadata.requires("jupyter-sandbox") or []
        if line.startswith("pydantic-monty")
    ]
    if wanted and not wanted[0].specifier.contains(installed, prereleases=True):
        pin = f"pydantic-monty{wanted[0].specifier}"
        detail = f"{installed} installed, jupyter-sandbox needs {pin}"
        return Check(name, "fail", detail, f"pip install '{pin}'")
    pinned = f" (pinned {wanted[0].specifier})" if wanted else ""
    return Check(name, "ok", f"{installed}{pinned}")


STRONG_LEVELS = ("own-uid+pidns+netns", "userns+pidns+netns")
"""Confinement levels at which workers cannot see each other (`orchestration._confine`)."""


def check_confinement() -> Check:
    """How Monty's workers are confined (the level this process uses, chosen by starting one):
    below `STRONG_LEVELS` a worker can see the others, which hold other cells' inputs (a
    warning). A worker that does not start at all fails: ``%%orchestrate`` cannot run."""
    from .orchestration import confinement, launcher_works

    name = "confinement"
    try:
        chosen = confinement()
    except OSError as error:  # no monty binary
        return Check(name, "fail", str(error), "pip install --force-reinstall pydantic-monty")
    if chosen.level in STRONG_LEVELS:
        return Check(name, "ok", f"Monty workers: {chosen.level}")
    if chosen.level == "none" and not launcher_works(chosen.binary):
        detail = f"the Monty worker {chosen.binary} does not start"
        return Check(name, "fail", detail, "pip install --force-reinstall pydantic-monty")
    detail = f"Monty workers: {chosen.level} (workers can see each other's processes)"
    return Check(name, "warn", detail, _confinement_fix())


def _confinement_fix() -> str:
    """What keeps the stronger levels from starting here, where the host says so."""
    from .orchestration import ACCOUNT_FILES, ids_taken

    missing = [t for t in ("unshare", "setsid", "setpriv") if shutil.which(t) is None]
    if missing:
        return f"as root: `apt-get install util-linux` (for {', '.join(missing)})"
    sysctls = {
        "/proc/sys/user/max_user_namespaces": ("0", "user.max_user_namespaces=15000"),
        "/proc/sys/kernel/unprivileged_userns_clone": ("0", "kernel.unprivileged_userns_clone=1"),
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": (
            "1",
            "kernel.apparmor_restrict_unprivileged_userns=0",
        ),
    }
    for path, (refusing, setting) in sysctls.items():
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        if value == refusing:
            return f"as root: `sysctl -w {setting}` (user namespaces are off)"
    if os.geteuid() == 0 and (taken := ids_taken(ACCOUNT_FILES)):
        return f"an account file names a uid of the workers' range: {taken[0]}"
    return "the host refuses new namespaces (in a container: its seccomp or AppArmor profile)"


LABEXTENSION = "jupyter-sandbox"


def check_labextension() -> Check:
    """What ``jupyter labextension list`` says of ours, read from the same places: the first
    ``labextensions/jupyter-sandbox`` on Jupyter's data path, and ``disabledExtensions`` of
    the ``labconfig/page_config`` files (JupyterLab's own modules take a second to import)."""
    from jupyter_core.paths import jupyter_config_path, jupyter_path

    from . import __version__

    name = "labextension"
    try:
        importlib.metadata.version("jupyterlab")
    except importlib.metadata.PackageNotFoundError:
        detail = f"JupyterLab is not installed for {sys.executable}"
        return Check(name, "warn", detail, "pip install jupyterlab", required=False)
    found = next(
        (
            Path(p, LABEXTENSION)
            for p in jupyter_path("labextensions")
            if Path(p, LABEXTENSION, "package.json").is_file()
        ),
        None,
    )
    if found is None:
        fix = "pip install jupyter-sandbox (its wheel installs the extension)"
        return Check(name, "warn", "not installed on Jupyter's data path", fix, required=False)
    version = json.loads((found / "package.json").read_text()).get("version", "?")
    if _disabled(LABEXTENSION, _page_config_disabled(jupyter_config_path())):
        fix = f"jupyter labextension enable {LABEXTENSION}"
        return Check(name, "warn", f"v{version} disabled ({found})", fix, required=False)
    if version != __version__:
        detail = f"v{version} at {found}, but this package is {__version__}"
        return Check(
            name, "warn", detail, "pip install --force-reinstall jupyter-sandbox", required=False
        )
    return Check(name, "ok", f"v{version} enabled ({found})", required=False)


def _page_config_disabled(config_path: Sequence[str]) -> dict[str, bool]:
    """``disabledExtensions`` merged over ``labconfig/page_config.json`` and
    ``page_config.d/*.json``, earlier folders winning (as jupyter_server's ConfigManager)."""
    disabled: dict[str, bool] = {}
    for folder in reversed(config_path):
        labconfig = Path(folder, "labconfig")
        for file in [
            labconfig / "page_config.json",
            *sorted(labconfig.glob("page_config.d/*.json")),
        ]:
            try:
                listed = json.loads(file.read_text()).get("disabledExtensions", {})
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(listed, list):
                listed = dict.fromkeys(listed, True)
            disabled.update(listed)
    return disabled


def _disabled(name: str, disabled: dict[str, bool]) -> bool:
    """JupyterLab's rule: a key disables what it names, or matches as a regular expression."""
    return any(v and (k == name or _matches(k, name)) for k, v in disabled.items())


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except re.error:  # JupyterLab would fail on it too; it disables nothing here
        return False


def check_kernelspec() -> Check:
    """The "Python 3 (sandbox)" kernelspec: found by Jupyter, and its Python exists."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    from ._kernelspec import DISPLAY_NAME, KERNEL_NAME

    name = "kernelspec"
    install = f"{sys.executable} -m jupyter_sandbox install-kernel"
    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        return Check(name, "warn", f"{DISPLAY_NAME!r} is not installed", install, required=False)
    python = spec.argv[0] if spec.argv else "?"
    if not os.access(python, os.X_OK):
        detail = f"{spec.resource_dir} runs {python}, which is missing"
        return Check(name, "warn", detail, install, required=False)
    other = "" if python == sys.executable else f" (its Python: {python})"
    return Check(name, "ok", f"{DISPLAY_NAME!r} at {spec.resource_dir}{other}", required=False)


# --- all of them ---


def run_checks(
    *,
    base_image: str | None = None,
    isolation: str | None = None,
    store: str | os.PathLike[str] | None = None,
) -> list[Check]:
    """Every check, in the order they are shown. ``base_image``, ``isolation`` and ``store``
    are the settings the caller runs with (a magic's ``%config``); None: their defaults
    (``$JUPYTER_SANDBOX_BASE_IMAGE``, ``$JUPYTER_SANDBOX_ISOLATION``, ``$JUPYTER_SANDBOX_STORE``).
    A check that raises unexpectedly is reported as failed, never hides the others."""
    socket_path = _socket_path()
    access = _guarded("engine access", lambda: check_access(socket_path))
    probe, why = _connect()
    engine = [
        _guarded("engine", lambda: check_engine(probe, why)),
        access,
        _guarded("base image", lambda: check_base_image(probe, base_image)),
        _guarded("gvisor", lambda: check_gvisor(probe, isolation)),
    ]
    local = [
        _guarded("store", lambda: check_store(store)),
        _guarded("pydantic-monty", check_monty),
        _guarded("confinement", check_confinement),
        _guarded("labextension", check_labextension),
        _guarded("kernelspec", check_kernelspec),
    ]
    return engine + local


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    try:
        return check()
    except DockerUnavailable as error:  # it answered the first request, not this one
        return Check(name, "fail", f"the engine stopped answering: {error}", RESTART_ENGINE)
    except Exception as error:  # a bug or an odd host: say so in the check's line
        return Check(name, "fail", f"the check itself failed: {type(error).__name__}: {error}")


def failed(checks: Sequence[Check]) -> bool:
    return any(check.state == "fail" for check in checks)


def report(checks: Sequence[Check]) -> Iterator[str]:
    """One line per check (``state  name  detail; fix: ...``; a failure in capitals, to be
    found at a glance), then a summary naming the required checks."""
    width = max(len(check.name) for check in checks)
    for check in checks:
        state = check.state.upper() if check.state == "fail" else check.state
        fix = f"; fix: {check.fix}" if check.fix and check.state in ("fail", "warn") else ""
        yield f"{state:4}  {check.name:{width}}  {check.detail}{fix}"
    counts = [(state, sum(c.state == state for c in checks)) for state in get_args(State)]
    summary = ", ".join(f"{n} {state}" for state, n in counts if n)
    required = ", ".join(c.name for c in checks if c.required)
    yield f"{summary} (required: {required}; a failed one makes the exit status 1)"
