"""Sandbox runs on a real Dask cluster.

The module starts a real scheduler and two real workers (``dask scheduler``/``dask worker``
subprocesses, each worker under its Nanny) on loopback. Worker "host" uses this machine's
engine; worker "own" has a temp folder of its own and a Docker engine of its own: the private
``dockerd`` of `test_adversarial_sandbox_spare` (own data root, exec root, pid file and socket,
no bridge, in its own network namespace), loaded with the base image by ``docker save | load``.
So a run on "own" proves the worker builds, stages and collects with its own engine and its
own files, and sends everything back as bytes. Everything started here is stopped at the end,
and no container either worker started may be left on either engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dask
import pytest

# the private engine (a session fixture, shared with the spare tests when both run)
from distributed import Client

from jupyter_sandbox import (
    ContainerError,
    Dir,
    File,
    SandboxCancelled,
    SandboxConfigError,
    create,
    orchestrate,
    tool,
)
from jupyter_sandbox.events import RunFinished
from jupyter_sandbox.sandbox import _client

pytestmark = pytest.mark.docker

_DASK = Path(sys.executable).with_name("dask")
_BOUND = 120.0
"""Seconds a wait below may take before the test fails: only there to prevent a hang."""


@dataclass
class Cluster:
    address: str
    client: Client
    workers: dict[str, str]
    """Worker name ("host", "own") -> address."""
    hosts: dict[str, str | None]
    """Worker name -> its engine's DOCKER_HOST (None: this machine's default engine)."""
    folders: dict[str, Path]

    def docker(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        host = self.hosts[name]
        where = ["-H", host] if host else []
        return subprocess.run(["docker", *where, *args], capture_output=True, text=True)

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> pid of its worker process (the Nanny's child)."""
        return self.client.run(os.getpid)

    def engine_of(self, address: str) -> str:
        return next(n for n, a in self.workers.items() if a == address)


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + _BOUND
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    """Stop a process and its group (the Nanny and its worker), killing it if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with_group = subprocess.run(["pgrep", "-g", str(process.pid)], capture_output=True)
    for pid in with_group.stdout.split():
        os.kill(int(pid), signal.SIGKILL)


def _containers(cluster: Cluster, name: str, pids: set[int]) -> list[str]:
    """Sandbox containers on worker ``name``'s engine that processes ``pids`` started."""
    found = cluster.docker(name, "ps", "-aq", "--filter", f"label={_client.KIND}=run")
    ids = found.stdout.split()
    if not ids:
        return []
    owners = cluster.docker(
        name, "inspect", "-f", f'{{{{index .Config.Labels "{_client.OWNER_PID}"}}}}', *ids
    )
    return [i for i, pid in zip(ids, owners.stdout.split(), strict=False) if int(pid) in pids]


@pytest.fixture(scope="module")
def cluster(second_engine) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="jsbx-dask-"))
    processes: list[subprocess.Popen] = []
    hosts = {"host": os.environ.get("DOCKER_HOST"), "own": second_engine.host}
    pids: set[int] = set()
    client = made = None

    def start(*args: str, env: dict[str, str], log: str) -> None:
        out = (root / log).open("wb")
        processes.append(
            subprocess.Popen(
                [str(_DASK), *args], stdout=out, stderr=out, env=env, start_new_session=True
            )
        )

    try:
        scheduler_file = root / "scheduler.json"
        start(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
            "--scheduler-file", str(scheduler_file), env=dict(os.environ), log="scheduler.log",
        )  # fmt: skip
        _until(scheduler_file.exists, "the scheduler's address file")
        folders = {}
        for name, host in hosts.items():
            folders[name] = root / name
            (folders[name] / "tmp").mkdir(parents=True)
            env = {**os.environ, "TMPDIR": str(folders[name] / "tmp")}
            env.pop("DOCKER_HOST", None)
            if host:
                env["DOCKER_HOST"] = host
            start(
                "worker", "--scheduler-file", str(scheduler_file), "--name", name,
                "--nthreads", "8", "--no-dashboard", "--local-directory", str(folders[name]),
                env=env, log=f"{name}.log",
            )  # fmt: skip
        client = Client(scheduler_file=str(scheduler_file), set_as_default=False)
        client.wait_for_workers(2, timeout=_BOUND)
        workers = {w["name"]: a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        made = Cluster(
            json.loads(scheduler_file.read_text())["address"], client, workers, hosts, folders
        )
        yield made
        pids.update(made.worker_pids().values())
    finally:
        if client is not None:
            client.close()
        for process in reversed(processes):
            _stop(process)
        leftovers = {}
        if made is not None:  # the workers' watchdogs remove what each left (within seconds)
            deadline = time.monotonic() + _BOUND
            while time.monotonic() < deadline:
                leftovers = {name: _containers(made, name, pids) for name in hosts}
                if not any(leftovers.values()):
                    break
                time.sleep(0.5)
        shutil.rmtree(root, ignore_errors=True)
    assert not any(leftovers.values()), f"containers the workers left: {leftovers}"


@pytest.fixture
def on(cluster):
    """Send this test's runs to one worker: ``with on("own"): ...``."""

    def pinned(name: str, *, loose: bool = False):
        return dask.annotate(workers=[cluster.workers[name]], allow_other_workers=loose)

    return pinned


def _echo(cluster, **options):
    """A run that says which container it is and then waits: something to stop mid-run."""
    code = "import socket, time\nprint('ready', socket.gethostname(), flush=True)\ntime.sleep(90)"
    return create("wait", code=code, cluster=cluster.address, **options)


def _ready(events: list, seen: threading.Event):
    """An event callback that notes the container's id once the code printed it."""

    def on_event(event) -> None:
        events.append(event)
        text = "".join(getattr(e, "text", "") for e in events)
        if "ready" in text and "\n" in text.split("ready", 1)[1]:
            seen.set()

    return on_event


def _container_id(events: list) -> str:
    text = "".join(getattr(e, "text", "") for e in events)
    return text.split("ready", 1)[1].split()[0]


def _gone(cluster: Cluster, container: str) -> bool:
    """Whether the container is on neither engine."""
    return all(cluster.docker(name, "inspect", container).returncode != 0 for name in cluster.hosts)


def test_a_worker_with_its_own_engine_and_folders_takes_files_and_dirs_and_builds(cluster, on):
    """On the worker whose engine and temp folder are its own: a `File` and a `Dir` in, a
    `File`, a `Dir` and a number back (as bytes, into this process' folders), the image built
    there from the spec, and the record names the worker."""
    source = Path(tempfile.mkdtemp(prefix="jsbx-dask-in-"))
    run = None
    try:
        (source / "data.txt").write_text("a\nb\nc\n")
        (source / "tree").mkdir()
        (source / "tree" / "x.txt").write_text("x")
        code = (
            "import pathlib, shutil\n"
            "lines = pathlib.Path(data).read_text().splitlines()\n"
            "n = len(lines)\n"
            "pathlib.Path('/var/outputs/rev').write_text('\\n'.join(reversed(lines)))\n"
            "shutil.copytree(tree, '/var/outputs/copy')\n"
        )
        sandbox = create(
            "files",
            code=code,
            inputs={"data": File, "tree": Dir},
            outputs={"n": int, "rev": File, "copy": Dir},
            additional_commands=["echo built-on-the-worker > /opt/marker"],
            cluster=cluster.address,
        )
        with on("own"):
            run = sandbox.execute({"data": File(source / "data.txt"), "tree": Dir(source / "tree")})
        n, rev, copy = run.value
        assert n == 3
        assert Path(rev).read_text() == "c\nb\na"
        assert (Path(copy) / "x.txt").read_text() == "x"
        assert not Path(rev).is_relative_to(cluster.folders["own"])  # ours, not the worker's
        assert run.to_record()["worker"] == cluster.workers["own"]
        assert run.build is not None and run.build.tag == run.image
        # built by the worker's own engine, from the spec: this machine's engine lacks it
        assert cluster.docker("own", "image", "inspect", run.image).returncode == 0
        assert cluster.docker("host", "image", "inspect", run.image).returncode != 0
        for folder in (Path(rev).parent, Path(copy).parent):
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(source, ignore_errors=True)
        if run is not None and run.build is not None:
            cluster.docker("own", "rmi", "-f", run.image)


def test_a_fan_out_of_16_sandbox_tool_calls_spreads_over_both_workers(cluster, tool_registry):
    """``asyncio.gather`` of 16 calls of a sandbox tool: every answer right, both workers used,
    each call's run record naming the worker that ran it."""
    double = create(
        "double", code="result = x * 2", inputs={"x": int}, outputs={"result": int},
        cluster=cluster.client,
    )  # fmt: skip
    as_tool = tool(double, concurrency=16)
    result = orchestrate(
        "import asyncio\nawait asyncio.gather(*[double(i) for i in range(16)])", tools=[as_tool]
    )
    assert result.value == [i * 2 for i in range(16)]
    workers = [call.children[0]["worker"] for call in result.trace]
    assert len(workers) == 16
    assert set(workers) == set(cluster.workers.values())


def test_cancelling_a_remote_run_stops_and_removes_its_container(cluster, on):
    """Cancelling the task awaiting ``execute_async`` (as a stopped orchestration does) stops
    the run on the worker, and the container is gone by the time the cancel returns."""
    events: list = []
    seen = threading.Event()

    async def main() -> None:
        task = asyncio.ensure_future(
            _echo(cluster).execute_async({}, on_event=_ready(events, seen))
        )
        while not seen.is_set():
            assert not task.done(), task
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with on("own"):
        asyncio.run(asyncio.wait_for(main(), _BOUND))
    assert _gone(cluster, _container_id(events))


def test_ctrl_c_during_a_remote_run_is_interrupted_and_removes_its_container(cluster, on):
    """SIGINT (the kernel's interrupt) while ``execute`` waits: the run stops on the worker,
    its record says interrupted, and its container is gone when the error arrives."""
    events: list = []
    seen = threading.Event()

    def interrupt() -> None:
        if seen.wait(_BOUND):
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with on("host"), pytest.raises(SandboxCancelled) as caught:
        _echo(cluster).execute({}, on_event=_ready(events, seen))
    assert caught.value.record["status"] == "interrupted"
    assert _gone(cluster, _container_id(events))


def test_a_worker_killed_mid_run_is_told_and_retried_and_its_container_goes(cluster, on):
    """SIGKILL to the worker process running the code: the attempt fails with one line saying
    that worker died, ``retries=1`` runs it again on a live worker (Dask's own re-run of the
    task only reports the death: the code never runs twice behind the retries rule), never a
    hang; the dead worker's watchdog removes its container; the Nanny brings it back."""
    events: list = []
    seen = threading.Event()
    pids = cluster.worker_pids()
    victim = cluster.workers["host"]
    # slow only in a container of the victim's (its pid names the folders mounted in)
    code = (
        "import re, socket, time\n"
        "mounts = open('/proc/self/mountinfo').read()\n"
        "owners = set(re.findall(r'jupyter-sandbox-run-(\\d+)-', mounts))\n"
        "print('ready', socket.gethostname(), flush=True)\n"
        "if str(slow) in owners:\n"
        "    time.sleep(90)\n"
        "done = True\n"
    )
    sandbox = create(
        "victim", code=code, inputs={"slow": int}, outputs={"done": bool}, retries=1,
        cluster=cluster.address,
    )  # fmt: skip
    result: list = []

    def run() -> None:
        with on("host", loose=True):  # first there; elsewhere once it is gone
            result.append(sandbox.execute({"slow": pids[victim]}, on_event=_ready(events, seen)))

    runner = threading.Thread(target=run)
    runner.start()
    assert seen.wait(_BOUND)
    assert [a for a, keys in cluster.client.processing().items() if keys] == [victim]
    os.kill(pids[victim], signal.SIGKILL)
    runner.join(_BOUND)
    assert not runner.is_alive(), "the run hung after its worker died"
    assert len(result) == 1, "the retry did not succeed"
    run = result[0]
    assert run.value is True and run.attempts == 2
    first = next(e for e in events if isinstance(e, RunFinished))
    assert first.error is not None and "\n" not in first.error
    assert f"the Dask worker {victim} died during the run" in first.error
    assert run.worker is not None and run.worker != victim
    _until(lambda: _gone(cluster, _container_id(events)), "the dead worker's container")
    cluster.client.wait_for_workers(2, timeout=_BOUND)
    cluster.workers.update(
        {w["name"]: a for a, w in cluster.client.scheduler_info(n_workers=-1)["workers"].items()}
    )


def test_the_magic_runs_on_the_cluster_by_option_and_by_config(cluster, on, shell):
    """``%%sandbox --cluster ADDR`` and ``%config SandboxMagics.cluster``: the run happens on
    the worker's engine (its image exists there only, so a local run could not start)."""
    only_there = "jupyter-sandbox/only-on-the-worker:1"
    assert cluster.docker("own", "tag", "jupyter-sandbox/base:bookworm", only_there).returncode == 0
    shell.user_ns["x"] = 20
    try:
        with on("own"):
            line = f"--cluster {cluster.address} --image {only_there} --in x --out y:int"
            assert shell.run_cell(f"%%sandbox {line}\ny = x + 1").success
            assert shell.user_ns["y"] == 21
            shell.run_line_magic("config", f"SandboxMagics.cluster = {cluster.address!r}")
            cell = f"%%sandbox --image {only_there} --in x --out y:int\ny = x + 2"
            assert shell.run_cell(cell).success
            assert shell.user_ns["y"] == 22
    finally:
        shell.run_line_magic("config", "SandboxMagics.cluster = ''")
        cluster.docker("own", "rmi", only_there)
    assert not shell.run_cell(cell).success  # locally: no such image


@pytest.mark.parametrize("cluster", [object(), "", "tcp://a b"], ids=["object", "empty", "space"])
def test_a_bad_cluster_is_one_line_at_create(cluster):
    with pytest.raises(SandboxConfigError) as caught:
        create("bad", code="pass", cluster=cluster)
    assert "cluster" in str(caught.value) and "\n" not in str(caught.value)


def test_an_unreachable_or_malformed_address_is_one_line_at_run():
    """Checked when a run needs the scheduler (an address may name one that starts later)."""
    with pytest.raises(ContainerError) as caught:
        create("x", code="pass", cluster="tcp://127.0.0.1:1").run()
    assert "not reachable" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(SandboxConfigError) as wrong:
        create("x", code="pass", cluster="nonsense:x").run()
    assert "no scheduler address" in str(wrong.value) and "\n" not in str(wrong.value)


def test_a_secret_reaches_the_remote_code_and_is_masked_on_its_way_back(cluster, monkeypatch):
    """The worker masks what the code prints; the record hides an output holding it."""
    monkeypatch.setenv("JSBX_CLUSTER_TOKEN", "tok-5f3a9c")
    code = (
        "import os\nprint(os.environ['JSBX_CLUSTER_TOKEN'])\nz = os.environ['JSBX_CLUSTER_TOKEN']"
    )
    sandbox = create(
        "secret", code=code, outputs={"z": str}, secrets=["JSBX_CLUSTER_TOKEN"],
        cluster=cluster.client,
    )  # fmt: skip
    events: list = []
    run = sandbox.execute({}, on_event=events.append)
    assert run.value == "tok-5f3a9c"  # the value is the program's own to return
    assert run.stdout == "***\n"
    assert "tok-5f3a9c" not in "".join(getattr(e, "text", "") for e in events)
    assert "tok-5f3a9c" not in json.dumps(run.to_record())
