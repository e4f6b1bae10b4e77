"""The path most users take: ``pip install`` of the released wheel (or sdist) into an existing
JupyterLab environment, used by a non-root user who is in the ``docker`` group.

Everything is real: the wheel is built from this checkout, a fresh venv of Debian's Python (not
root's) gets JupyterLab first and then the wheel, and a real user account runs ``jupyter``,
``install-kernel``, a notebook through ``nbconvert --execute`` on both kernels, and its own
``jupyter lab``, looked at in Chromium. Select with ``-m install``; about 2.5 minutes on 2 idle
cores (longer when they are shared), most of it pip installing JupyterLab.
"""

from __future__ import annotations

import ast
import grp
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from _jupyterlab import CHROMIUM, DISABLED, _free_port
from _paths import ROOT, SCREENSHOTS
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_sandbox import __version__
from jupyter_sandbox._kernelspec import LOGOS

pytestmark = pytest.mark.install

ROOT = ROOT
USER = "jupyter-sandbox-user"
PYTHON = "/usr/bin/python3"  # Debian's: root's own Python may sit in a folder only root reads
SOCKET = Path("/var/run/docker.sock")
LABEXTENSION = "share/jupyter/labextensions/jupyter-sandbox"


@dataclass(frozen=True)
class Account:
    """The non-root user and the folder this test session gives it."""

    name: str
    uid: int
    work: Path

    @property
    def home(self) -> Path:
        """A fresh home: no kernelspec or pip cache of an earlier session counts."""
        return self.work / "home"

    def command(self, argv: list[str], env: dict[str, str]) -> list[str]:
        """``argv`` as this user with exactly ``env`` (nothing of root's environment leaks in)."""
        assignments = [f"{key}={value}" for key, value in env.items()]
        return ["runuser", "-u", self.name, "--", "env", "-i", *assignments, *argv]

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(argv, env), cwd=self.work, capture_output=True, text=True, check=False
        )


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    """A user in the ``docker`` group (created once per machine) and a fresh folder it owns."""
    if os.geteuid() != 0:
        pytest.fail("creating the test user needs root (the README's test command runs as root)")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--groups", "docker", USER], check=True)
    subprocess.run(["usermod", "--append", "--groups", "docker", USER], check=True)
    # The engine grants its socket to the docker group; without that the group buys nothing.
    socket = SOCKET.stat()
    assert grp.getgrgid(socket.st_gid).gr_name == "docker", "docker.sock is not group docker"
    assert socket.st_mode & stat.S_IRGRP and socket.st_mode & stat.S_IWGRP
    entry = pwd.getpwnam(USER)
    work = Path(tempfile.mkdtemp(prefix="jupyter-sandbox-install-"))
    os.chown(work, entry.pw_uid, entry.pw_gid)
    yield Account(USER, entry.pw_uid, work)
    shutil.rmtree(work)


def pip_settings() -> dict[str, str]:
    """This machine's pip settings (CA bundle of the TLS-inspecting proxy, extra indexes) as
    ``PIP_*`` variables: some live in root's own pip.conf, which the user cannot read."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    settings = {}
    for line in listed.splitlines():  # e.g. global.extra-index-url='file:///opt/pypi/simple'
        key, _, value = line.partition("=")
        name = key.split(".", 1)[1].upper().replace("-", "_")
        settings[f"PIP_{name}"] = ast.literal_eval(value)
    return settings


@pytest.fixture(scope="module")
def dist(account: Account) -> Path:
    """The sdist and the wheel people install, in a folder the user can read: the ones `.ci/run`
    built (``scripts/package.sh``, announced in ``JUPYTER_SANDBOX_DIST``), or built here the same
    way (``python -m build`` in clean environments, the build backend pinned)."""
    folder = account.work / "dist"
    given = os.environ.get("JUPYTER_SANDBOX_DIST")
    if given:
        shutil.copytree(given, folder)
    else:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts/package.sh"), str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    subprocess.run(["chown", "-R", f"{account.name}:", str(folder)], check=True)
    return folder


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("jupyter_sandbox-*.whl")
    return built


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    (built,) = dist.glob("jupyter_sandbox-*.tar.gz")
    return built


@pytest.fixture(scope="module")
def venv(account: Account, wheel: Path) -> Path:
    """A fresh venv the user owns: JupyterLab installed first, then our wheel, both by pip."""
    venv = account.work / "venv"
    env = user_env(venv, account.home) | pip_settings()
    for argv in (
        [PYTHON, "-m", "venv", str(venv)],
        [f"{venv}/bin/pip", "install", "--quiet", "jupyterlab"],
        [f"{venv}/bin/pip", "install", "--quiet", str(wheel)],
    ):
        done = account.run(argv, env)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
    return venv


def user_env(venv: Path, home: Path) -> dict[str, str]:
    """The environment a user's shell would give: their home, the venv first on PATH (and the
    engine at its default socket, reached through the docker group)."""
    return {"HOME": str(home), "PATH": f"{venv}/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def kernel_dir(account: Account, venv: Path) -> Path:
    """``install-kernel --user``: the kernelspec lands in the user's own Jupyter folder."""
    done = account.run(
        [f"{venv}/bin/python", "-m", "jupyter_sandbox", "install-kernel", "--user"],
        user_env(venv, account.home),
    )
    assert done.returncode == 0, done.stderr
    folder = account.home / ".local/share/jupyter/kernels/jupyter-sandbox"
    assert f"in {folder}" in done.stdout
    return folder


def test_the_version_is_written_once_in_package_json(wheel):
    """pyproject.toml reads it from the extension's package.json (hatch-nodejs-version)."""
    package = json.loads((ROOT / "labextension/package.json").read_text())
    assert __version__ == package["version"]
    assert wheel.name == f"jupyter_sandbox-{__version__}-py3-none-any.whl"


def test_the_wheel_carries_the_labextension_and_the_kernel_logos(wheel):
    listed = zipfile.ZipFile(wheel).namelist()
    # Each file once: jupyter-builder 1.3 writes install.json into the built folder, and a second
    # shared-data entry for the same path failed the build ("A second file is being added").
    assert len(listed) == len(set(listed))
    names = set(listed)
    data = f"jupyter_sandbox-{__version__}.data/data/{LABEXTENSION}"
    assert {f"{data}/package.json", f"{data}/install.json", f"{data}/static/style.js"} <= names
    assert any(re.fullmatch(rf"{data}/static/remoteEntry\.\w+\.js", n) for n in names)
    assert {f"jupyter_sandbox/resources/{logo}" for logo in LOGOS} <= names


def test_the_sdist_carries_the_built_extension(sdist):
    """So that installing it needs no Node: the extension is built once, by the release."""
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames()}
    built = "jupyter_sandbox/labextension"
    assert {f"{built}/package.json", f"{built}/install.json", f"{built}/static/style.js"} <= names
    assert {"labextension/package.json", "labextension/package-lock.json"} <= names
    assert not any(name.startswith("labextension/node_modules/") for name in names)


def test_the_sdist_installs_as_the_user_with_no_node_on_path(account, sdist):
    """A fresh venv whose PATH has no ``node`` or ``npm``: pip builds the wheel from the sdist
    with the extension it carries, and JupyterLab's folder gets it."""
    venv = account.work / "venv-sdist"
    env = user_env(venv, account.work / "home-sdist") | pip_settings()
    env["PATH"] = f"{venv}/bin"  # nothing else: no /usr/bin/node
    for argv in (
        [PYTHON, "-m", "venv", str(venv)],
        [f"{venv}/bin/pip", "install", "--quiet", str(sdist)],
    ):
        done = account.run(argv, env)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
    assert shutil.which("node", path=env["PATH"]) is None
    assert shutil.which("npm", path=env["PATH"]) is None
    installed = venv / LABEXTENSION
    for name in ("package.json", "install.json", "static/style.js"):
        assert (installed / name).is_file(), name
    done = account.run(
        [f"{venv}/bin/python", "-c", "import jupyter_sandbox; print(jupyter_sandbox.__version__)"],
        env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __version__


def test_jupyterlab_lists_the_extension_enabled_and_ok(account, venv):
    done = account.run(["jupyter", "labextension", "list"], user_env(venv, account.home))
    listing = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # drop the colours
    assert re.search(r"jupyter-sandbox v[\d.]+ enabled OK", listing), listing


def test_the_kernelspec_installs_per_user_and_jupyter_finds_it(account, venv, kernel_dir):
    done = account.run(["jupyter", "kernelspec", "list", "--json"], user_env(venv, account.home))
    found = json.loads(done.stdout)
    spec = found["kernelspecs"]["jupyter-sandbox"]
    assert Path(spec["resource_dir"]) == kernel_dir
    assert spec["spec"]["argv"][0] == f"{venv}/bin/python"
    assert spec["spec"]["display_name"] == "Python 3 (sandbox)"
    assert set(LOGOS) <= {p.name for p in kernel_dir.iterdir()}


def test_install_kernel_goes_per_user_when_the_environment_is_read_only(account, venv):
    """Like a shared or system Jupyter the user cannot write to: no PermissionError."""
    home = account.work / "home-read-only-env"
    subprocess.run(["chmod", "-R", "a-w", str(venv)], check=True)
    try:
        done = account.run(
            [f"{venv}/bin/python", "-m", "jupyter_sandbox", "install-kernel"],
            user_env(venv, home),
        )
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(venv)], check=True)
    assert done.returncode == 0, done.stderr
    folder = home / ".local/share/jupyter/kernels/jupyter-sandbox"
    assert f"in {folder}" in done.stdout
    assert (folder / "kernel.json").is_file()


@pytest.mark.docker
@pytest.mark.parametrize("kernel", ["python3", "jupyter-sandbox"])
def test_a_notebook_runs_orchestrate_and_sandbox_as_the_user(account, venv, kernel_dir, kernel):
    """In the venv's own kernel and in the installed sandbox kernel: the usual first line loads
    the magics quietly (no "already loaded" under the sandbox kernel), the kernel is the user's,
    and both magics work (the sandbox uses the engine's base image, shared by all users)."""
    cells = [
        "%load_ext jupyter_sandbox",
        "import os\nos.getuid()",
        "from jupyter_sandbox import tool\n\n@tool\ndef add(x: int, y: int) -> int:\n"
        "    return x + y",
        "%%orchestrate\nadd(20, 1) * 2",
        "x = 21",
        "%%sandbox --in x --out result:int\nprint('in a container')\nresult = x * 2",
        "result",
    ]
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    nbformat.write(nb, account.work / f"{kernel}.ipynb")
    command = (
        f"jupyter nbconvert --to notebook --execute --output {kernel}-executed.ipynb"
        f" --ExecutePreprocessor.kernel_name={kernel} --ExecutePreprocessor.timeout=300"
    )
    done = account.run([*command.split(), f"{kernel}.ipynb"], user_env(venv, account.home))
    assert done.returncode == 0, done.stderr
    ran = nbformat.read(account.work / f"{kernel}-executed.ipynb", as_version=4)
    load, uid, _, orchestrate, _, sandbox, result = (cell.outputs for cell in ran.cells)

    def value(outputs: list[dict]) -> str:
        (out,) = (o for o in outputs if o["output_type"] == "execute_result")
        text: str = out["data"]["text/plain"]
        return text

    assert load == []  # no "The jupyter_sandbox extension is already loaded"
    assert value(uid) == str(account.uid)
    assert value(orchestrate) == "42"
    streamed = "".join(o.get("text", "") for o in sandbox if o["output_type"] == "stream")
    assert "in a container" in streamed
    assert not [o for o in sandbox if o["output_type"] == "error"]
    assert value(result) == "42"


@pytest.mark.browser
def test_the_users_jupyterlab_shows_the_sandbox_kernel_with_its_logo(account, venv, kernel_dir):
    """The user's own JupyterLab, in Chromium: the launcher offers "Python 3 (sandbox)" with our
    logo, served from the per-user kernelspec (screenshots in the light and the dark theme)."""
    from playwright.sync_api import sync_playwright

    labconfig = account.home / ".jupyter" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": DISABLED}))
    subprocess.run(["chown", "-R", f"{account.name}:", str(account.home / ".jupyter")], check=True)
    token, port = secrets.token_hex(16), _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
    argv += [f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True"]
    lab = subprocess.Popen(
        account.command(argv, user_env(venv, account.home)),
        cwd=account.work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:  # the test's own timeout bounds this wait
            assert lab.poll() is None, "jupyter lab exited"
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5).close()
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 700})
            page.goto(f"{url}/lab?reset&token={token}")
            page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
            card = page.locator('.jp-LauncherCard[data-category="Notebook"]').filter(
                has_text="Python 3 (sandbox)"
            )
            logo = card.locator("img")
            logo.wait_for(timeout=60_000)
            assert logo.get_attribute("src").endswith("/kernelspecs/jupyter-sandbox/logo-svg.svg")
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=logo.element_handle()
            )
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
                page.evaluate(
                    "theme => window.jupyterapp.commands.execute('apputils:change-theme', {theme})",
                    theme,
                )
                page.wait_for_function(
                    "theme => document.body.dataset.jpThemeName === theme", arg=theme
                )
                page.screenshot(path=SCREENSHOTS / f"launcher-sandbox-kernel-{name}.png")
            browser.close()
    finally:
        lab.terminate()
        lab.wait()
