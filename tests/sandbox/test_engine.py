"""The Docker engine against a real engine: types, modes, safety defaults and faults.

Every test uses the local base image (no build) and must leave no container behind.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os

import pytest
from _probes import CONFINEMENT_PROBE, NETWORK_PROBE, assert_confined, disk_fill, disk_filled

from jupyter_sandbox import (
    Dir,
    DockerUnavailable,
    File,
    InvalidOutput,
    MissingOutput,
    NonZeroExit,
    OutOfMemory,
    OutputLimitExceeded,
    SandboxConfigError,
    SandboxTimeout,
    create,
)
from jupyter_sandbox.errors import IsolationUnavailable
from jupyter_sandbox.events import Output, RunFinished, RunStarted
from jupyter_sandbox.sandbox import _client, _pool

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

NASTY = "a'b\"c\n$(touch /tmp/pwned); `id` && echo pwned | cat ; \\ \t é 🐍 %s {x} --help"
LIST = "python3 -c 'import os, sys; print(*sorted(os.listdir(sys.argv[1])), end=\"\")'"
"""``ls`` for the shell: coreutils' ``ls`` fails under Debian 12's gVisor (see test_isolation)."""


def echo(tag_or_type, value, **kwargs):
    """Send ``value`` in and back out unchanged through auto-IO."""
    sandbox = create("echo", code="y = x", inputs={"x": tag_or_type}, outputs={"y": tag_or_type})
    return sandbox.run(x=value, **kwargs)


def test_every_type_round_trips_in_one_run():
    values = {
        "i": 2**70,
        "f": 0.1,
        "b": False,
        "s": NASTY,
        "raw": bytes(range(256)),
        "nothing": None,
        "when": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC),
        "day": dt.date(2024, 2, 29),
        "delta": dt.timedelta(days=-1, microseconds=3),
        "items": [1, "two", None, [3.5]],
        "mapping": {"k": NASTY, "n": {"deep": [True]}},
    }
    code = "\n".join(f"{name}_out = {name}" for name in values)
    sandbox = create(
        "all-types",
        code=code,
        inputs=dict.fromkeys(values),  # types inferred from the values
        outputs={f"{name}_out": type(v) for name, v in values.items()},
    )
    run = sandbox.execute(values)
    assert list(run.outputs) == [f"{name}_out" for name in values]  # declaration order
    assert run.value == tuple(values.values())
    assert [type(v) for v in run.value] == [type(v) for v in values.values()]


def test_single_output_is_the_value_and_types_come_in_typed():
    sandbox = create("double", code="result = x * 2", inputs={"x": int}, outputs={"result": int})
    assert sandbox.run(x=21) == 42
    assert (
        create("t", code="t = type(x).__name__", inputs=["x"], outputs=["t"]).run(x=dt.timedelta(1))
        == "timedelta"
    )


def test_outputs_without_a_type_take_the_type_of_the_value():
    sandbox = create("infer", code="a = 1.5\nb = [1]\nc = b'x'", outputs=["a", "b", "c"])
    assert sandbox.run() == (1.5, [1], b"x")


def test_injection_attempt_stays_data(isolation):
    payload = "'; import os; os.system('touch /tmp/pwned'); '\"\n$(touch /tmp/pwned)"
    code = "import os\nout = x\nexists = os.path.exists('/tmp/pwned')"
    sandbox = create("inject", code=code, inputs={"x": str}, outputs={"out": str, "exists": bool})
    assert sandbox.run(x=payload) == (payload, False)
    shell = create(
        "inject-cmd",
        command=[
            "bash",
            "-c",
            f"cat /var/inputs/x > /var/outputs/out; {LIST} /tmp > /var/outputs/tmp",
        ],
        inputs={"x": str},
        outputs={"out": str, "tmp": str},
    )
    assert shell.run(x=payload) == (payload, "")


def test_verbatim_mode_reads_and_writes_files():
    script = (
        "import json, pathlib\n"
        "payload = json.loads(pathlib.Path('/var/inputs/payload').read_text())\n"
        "n = int(pathlib.Path('/var/inputs/n').read_text())\n"
        "pathlib.Path('/var/outputs/total').write_text(str(sum(payload['values']) * n))\n"
    )
    sandbox = create(
        "etl",
        code=script,
        inputs={"payload": dict, "n": int},
        outputs={"total": int},
        auto_io=False,
    )
    assert sandbox.run(payload={"values": [1, 2, 3]}, n=2) == 12


def test_command_mode_with_file_inputs_and_arguments(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("line 1\n\nline 2\n")
    sandbox = create(
        "line-counter",
        command=["/bin/bash", "-c", 'grep -c . "$0" > /var/outputs/line_count'],
        arguments=["/var/inputs/data_file"],
        inputs={"data_file": File},
        outputs={"line_count": int},
    )
    assert sandbox.run(data_file=File(data)) == 2


def test_file_and_dir_in_and_out(tmp_path):
    (tmp_path / "in.txt").write_text("hello")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "leaf.txt").write_text("leaf")
    os.chmod(tmp_path / "in.txt", 0o600)  # private on the host: still readable inside
    code = (
        "import pathlib, shutil\n"
        "text = pathlib.Path(doc).read_text()\n"
        "pathlib.Path('/var/outputs/report').write_text(text.upper())\n"
        "shutil.copytree(tree, '/var/outputs/copy')\n"
        "pathlib.Path('/var/outputs/copy/new.txt').write_text('new')\n"
    )
    sandbox = create(
        "files",
        code=code,
        inputs={"doc": File, "tree": Dir},
        outputs={"report": File, "copy": Dir},
    )
    report, copy = sandbox.run(doc=File(tmp_path / "in.txt"), tree=Dir(tree))
    assert isinstance(report, File)
    assert report.read_text() == "HELLO"
    assert isinstance(copy, Dir)
    assert (copy.path / "sub" / "leaf.txt").read_text() == "leaf"
    assert (copy.path / "new.txt").read_text() == "new"


def test_inputs_are_read_only_inside(tmp_path, isolation):
    (tmp_path / "f").write_text("x")
    code = "import pathlib\npathlib.Path(f).write_text('changed')"
    sandbox = create("ro", code=code, inputs={"f": File})
    # gVisor checks the file's permissions before the read-only mount: EACCES, not EROFS
    refused = "Read-only file system" if isolation == "container" else "Permission denied"
    with pytest.raises(NonZeroExit, match=refused):
        sandbox.run(f=File(tmp_path / "f"))
    assert (tmp_path / "f").read_text() == "x"


def test_stdout_and_stderr_stream_as_events():
    events = []
    code = "import sys\nprint('out-1')\nprint('err-1', file=sys.stderr)\nprint('out-2')"
    run = create("io", code=code).execute({}, on_event=events.append)
    assert run.stdout == "out-1\nout-2\n"
    assert run.stderr == "err-1\n"
    kinds = [type(e) for e in events]
    assert kinds[0] is RunStarted
    assert kinds[-1] is RunFinished
    assert "".join(e.text for e in events if isinstance(e, Output) and e.stream == "stdout") == (
        "out-1\nout-2\n"
    )


def test_record_shape_is_json_safe():
    run = create("rec", code="y = x + 1", inputs={"x": int}, outputs={"y": int}).execute({"x": 1})
    record = json.loads(json.dumps(run.to_record()))
    assert record["version"] == 1
    assert record["kind"] == "sandbox"
    assert record["status"] == "ok"
    assert record["error"] is None
    assert record["exit_code"] == 0
    assert record["attempts"] == 1
    assert record["cached"] is False
    assert record["build"] is None
    assert record["outputs"] == {"y": {"type": "int", "preview": "2"}}
    assert record["inputs"] == {"x": {"type": "int", "preview": "1"}}
    assert set(record) == {
        "version", "kind", "name", "image", "status", "error", "duration", "exit_code",
        "attempts", "cached", "build", "stdout", "stdout_chars", "stderr", "stderr_chars",
        "outputs", "inputs",
    }  # fmt: skip


def test_non_zero_exit_has_code_and_stderr_tail_and_record():
    code = "import sys\nprint('before')\nraise ValueError('boom at line 3')"
    with pytest.raises(NonZeroExit) as info:
        create("fail", code=code).run()
    err = info.value
    assert err.exit_code == 1
    assert "ValueError: boom at line 3" in str(err)
    assert 'File "<cell>", line 3' in err.stderr_tail
    assert err.record is not None
    assert err.record["status"] == "error"
    assert err.record["stdout"] == "before\n"


def test_missing_output_is_named():
    with pytest.raises(MissingOutput, match="'total'") as info:
        create("m", code="other = 1", outputs={"total": int}).run()
    assert info.value.name == "total"


def test_output_of_the_wrong_type_is_refused():
    with pytest.raises(NonZeroExit, match="output 'n': expected int, got str"):
        create("wrong", code="n = 'seven'", outputs={"n": int}).run()
    verbatim = create(
        "wrong-file",
        code="open('/var/outputs/n', 'w').write('seven')",
        outputs={"n": int},
        auto_io=False,
    )
    with pytest.raises(InvalidOutput, match="'n' is not a valid int"):
        verbatim.run()


def test_timeout_kills_and_says_so(isolation):
    sandbox = create("sleepy", command=["sleep", "60"], timeout=2)
    with pytest.raises(SandboxTimeout, match=r"timed out after 2 s") as info:
        sandbox.run()
    assert info.value.record["status"] == "error"


def test_background_child_does_not_keep_the_run_alive(isolation):
    sandbox = create("bg", command=["bash", "-c", "sleep 60 & echo started"], timeout=30)
    run = sandbox.execute({})  # the timeout would raise SandboxTimeout: it ended on bash's exit
    assert run.stdout == "started\n"


def test_memory_bomb_is_out_of_memory(isolation, limit_holds):
    """Where the engine would drop the limit (rootless Podman on cgroup v1) the bomb never
    runs: the run is refused, naming the limit."""
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(10 * 2**20))"
    sandbox = create("oom", code=code, resources={"memory": "128m"}, timeout=60)
    if not limit_holds("memory"):
        with pytest.raises(IsolationUnavailable, match="drop the memory,"):
            sandbox.run()
        return
    with pytest.raises(OutOfMemory, match="out of memory: killed at the 128m limit"):
        sandbox.run()


@pytest.fixture
def no_oom_events(docker_engine, monkeypatch):
    """The engine's event log as a loaded host left it: its shim reports
    an OOM kill only if the container's memory cgroup is still there when it looks, and a
    gVisor sandbox killed for memory takes its cgroup with it, so under two CPU hogs the
    ``oom`` event went missing and a memory bomb was exit 137. Here it never comes."""
    events = docker_engine.api.events

    def without_oom(*args, **kwargs):
        return (e for e in events(*args, **kwargs) if e.get("Action") != "oom")

    monkeypatch.setattr(docker_engine.api, "events", without_oom)


@pytest.mark.parametrize("spare", [True, False], ids=["in a spare", "own process"])
def test_memory_bomb_is_out_of_memory_whatever_the_engine_reports(
    spare, no_oom_events, isolation, limit_holds
):
    """Under gVisor the bomb kills the whole sandbox and the run learns how from the engine:
    without its ``oom`` event the run was `NonZeroExit` 137. A SIGKILL the engine never sent
    (no ``kill`` event) to a container under a memory limit is the kernel's OOM killer; under
    runc the cgroup's own counter, read by the container's script, says so either way. (A
    ``docker kill`` from outside stays exit 137: test_sandbox_own_process.)"""
    if not limit_holds("memory"):  # rootless Podman on cgroup v1: the refusal is tested above
        pytest.skip("this engine drops memory limits: runs are refused, not killed")
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(10 * 2**20))"
    limits = {"resources": {"memory": "128m"}, "timeout": 60}
    _pool.settle()
    if spare:  # a run of the same limits leaves a spare: the bomb runs in its waiter
        create("warm", code="pass", **limits).run()
        _pool.quiesce()
    with pytest.raises(OutOfMemory, match="out of memory: killed at the 128m limit") as info:
        create("oom", code=code, **limits).run()
    assert info.value.record["exit_code"] == 137


def test_fork_bomb_is_contained(isolation, limit_holds):
    code = "import os\nwhile True:\n    os.fork()"
    sandbox = create("forkbomb", code=code, resources={"pids": 64}, timeout=20)
    if not limit_holds("pids"):
        with pytest.raises(IsolationUnavailable, match="pids"):
            sandbox.run()
        return
    with pytest.raises((NonZeroExit, SandboxTimeout)):
        sandbox.run()


def test_disk_fill_hits_the_tmpfs_limit_not_the_host(isolation):
    code = disk_fill("/tmp", "/var/outputs")
    run = create("diskfill", code=code, resources={"disk": "16m"}, timeout=60).execute({})
    assert run.stdout.splitlines() == disk_filled(isolation, "/tmp", "/var/outputs")


def test_stdout_flood_is_capped_and_stopped(isolation):
    code = "while True:\n    print('x' * 1000)"
    sandbox = create("flood", code=code, resources={"output": "1m"}, timeout=60)
    with pytest.raises(OutputLimitExceeded, match="1m cap") as info:
        sandbox.run()
    assert len(info.value.record["stdout"]) <= 2**20


def test_network_is_off_by_default(isolation):
    result = create("net", code=NETWORK_PROBE, outputs={"result": str}).run()
    assert result != "connected"
    interfaces = create("ifaces", command=["bash", "-c", f"{LIST} /sys/class/net"]).execute({})
    assert interfaces.stdout.split() == ["lo"]


def test_confinement_defaults(isolation, limit_holds):
    outputs = {"uid": int, "caps": str, "nnp": str, "pids": str}
    uid, caps, nnp, pids = create("conf", code=CONFINEMENT_PROBE, outputs=outputs).run()
    assert_confined(uid, caps, nnp, pids, isolation, limit_holds)


def test_host_environment_does_not_leak(monkeypatch, isolation):
    monkeypatch.setenv("JSBX_HOST_ONLY", "leak-me")
    env = create("env", command=["env"]).execute({}).stdout
    assert "leak-me" not in env
    assert "JSBX_HOST_ONLY" not in env


def test_env_vars_and_secrets_enter_only_when_asked(monkeypatch, isolation):
    monkeypatch.setenv("JSBX_TOKEN", "s3cr3t-value")
    code = (
        "import os\n"
        "print(os.environ['JSBX_TOKEN'])\n"
        "level = os.environ['LEVEL']\n"
        "n = len(os.environ['JSBX_TOKEN'])\n"
    )
    sandbox = create(
        "secret",
        code=code,
        outputs={"level": str, "n": int},
        env_vars={"LEVEL": "debug"},
        secrets=["JSBX_TOKEN"],
    )
    run = sandbox.execute({})
    assert run.value == ("debug", len("s3cr3t-value"))
    assert "s3cr3t-value" not in run.stdout  # masked in the transcript
    assert "s3cr3t-value" not in json.dumps(run.to_record())


def test_missing_secret_fails_before_running(monkeypatch):
    monkeypatch.delenv("JSBX_ABSENT", raising=False)
    with pytest.raises(SandboxConfigError, match="JSBX_ABSENT"):
        create("nosecret", code="", secrets=["JSBX_ABSENT"]).run()


def test_retries_rerun_before_the_error_surfaces(isolation):
    events = []
    sandbox = create("flaky", code="raise SystemExit(2)", retries=2)
    with pytest.raises(NonZeroExit) as info:
        sandbox.execute({}, on_event=events.append)
    assert [e.attempt for e in events if isinstance(e, RunStarted)] == [1, 2, 3]
    assert info.value.record["attempts"] == 3


def test_result_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    code = "import random\nvalue = random.random()\nprint('ran')"
    cached = create("c", code=code, inputs={"x": int}, outputs={"value": float}, cache="auto")
    first = cached.execute({"x": 1})
    again = cached.execute({"x": 1})
    assert not first.cached
    assert again.cached
    assert again.value == first.value
    assert again.stdout == "ran\n"
    assert cached.execute({"x": 2}).value != first.value  # inputs are in the key
    edited = create(
        "c", code=code + "\n", inputs={"x": int}, outputs={"value": float}, cache="auto"
    )
    assert edited.execute({"x": 1}).value != first.value  # so is the code
    override = create("c", code=code, inputs={"x": int}, outputs={"value": float}, cache="override")
    fresh = override.execute({"x": 1})
    assert not fresh.cached
    assert cached.execute({"x": 1}).value == fresh.value
    off = create("c", code=code, inputs={"x": int}, outputs={"value": float})
    assert not off.execute({"x": 1}).cached


def test_run_async():
    sandbox = create("async", code="y = x + 1", inputs={"x": int}, outputs={"y": int})

    async def both():
        return await asyncio.gather(sandbox.run_async(x=1), sandbox.run_async(x=2))

    assert asyncio.run(both()) == [2, 3]


def test_prebuilt_image_runs_as_is():
    sandbox = create("pre", code="y = 1", outputs={"y": int}, image="jupyter-sandbox/base:bookworm")
    run = sandbox.execute({})
    assert run.value == 1
    assert run.build is None


def test_missing_image_says_what_to_do():
    from jupyter_sandbox import ImageBuildError

    with pytest.raises(ImageBuildError, match="not available"):
        create("gone", code="", image="jupyter-sandbox/nonexistent:1").run()


def test_docker_unavailable_is_one_line(monkeypatch):
    _client._connect.cache_clear()
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    try:
        with pytest.raises(DockerUnavailable) as info:
            create("x", code="").run()
    finally:
        monkeypatch.delenv("DOCKER_HOST")
        _client._connect.cache_clear()
    message = str(info.value)
    assert "\n" not in message
    assert "bash scripts/bootstrap.sh" in message
    assert info.value.record is None  # nothing ran: no record to display


def test_orphans_of_dead_processes_are_reaped(docker_engine):
    from jupyter_sandbox.sandbox import reap_orphans

    dead = docker_engine.containers.create(
        "jupyter-sandbox/base:bookworm",
        command=["sleep", "60"],
        labels={
            "jupyter-sandbox": "1",
            "jupyter-sandbox.kind": "run",
            _client.OWNER_PID: "999999999",
            _client.OWNER_HOST: _client.owner_labels()[_client.OWNER_HOST],
        },
    )
    mine = docker_engine.containers.create(
        "jupyter-sandbox/base:bookworm",
        command=["sleep", "60"],
        labels={"jupyter-sandbox": "1", "jupyter-sandbox.kind": "run", **_client.owner_labels()},
    )
    try:
        reaped = reap_orphans()
        assert dead.id in reaped
        assert mine.id not in reaped
    finally:
        mine.remove(force=True)
