"""A secret's value shows up nowhere the run reports or keeps, and no
host user but root can read it from a running sandbox.

The code in the container gets the secret (that is why it was passed), then tries every way of
letting it out that honest-but-careless code has: printing it a character or a byte at a time,
across the engine's 4/32/64 KiB frames, on both streams, in a traceback, in an output value, in
an output that fails to parse, in a cached run. Masking recognises the secret's text; code that
means to leak encodes it first, which no masking can stop (the README says so).
"""

from __future__ import annotations

import base64
import contextlib
import html
import itertools
import json
import os
import pwd
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from jupyter_sandbox import (
    ContainerError,
    InvalidOutput,
    NonZeroExit,
    SandboxCancelled,
    create,
    orchestrate,
    tool,
)
from jupyter_sandbox._shared._preview import preview
from jupyter_sandbox._shared._secrets import HIDDEN, StreamMasker, forms, holds_secret
from jupyter_sandbox.display import bundle
from jupyter_sandbox.events import Output, RunFinished
from jupyter_sandbox.sandbox import _cache, _client, _pool
from jupyter_sandbox.sandbox._isolation import STATE_ROOTS

SECRET = "tök-✓-Zq81xV-s3cr3t"
"""Non-ASCII on purpose: its UTF-8 bytes can be cut in the middle of a character."""
_BOUND = 60.0
"""Seconds a wait below may take before the test fails: only there to prevent a hang."""


@pytest.fixture
def secret(monkeypatch) -> str:
    monkeypatch.setenv("JSBX_TOKEN", SECRET)
    return SECRET


def _shows(secret: str, *texts: str) -> bool:
    """True when any text shows the secret, raw or HTML-escaped."""
    return any(s in t for t in texts for s in (secret, html.escape(secret)))


def _everything_shown(record: dict) -> str:
    """The record and every representation of its display bundle, as one text."""
    return json.dumps(bundle(record), ensure_ascii=False, default=str)


def test_a_secret_cut_at_any_two_bytes_is_masked():
    """Every way of cutting a stream holding the secret twice into three chunks (UTF-8
    sequences cut too) gives the same masked text as one chunk."""
    data = f"a{SECRET}b{SECRET}".encode()
    expected = "a***b***"
    for i, j in itertools.combinations(range(len(data) + 1), 2):
        masker = StreamMasker((SECRET,))
        text = "".join(masker.feed(part) for part in (data[:i], data[i:j], data[j:]))
        assert text + masker.flush() == expected, (i, j)


def test_a_secret_fed_one_byte_at_a_time_is_held_back_only_while_it_could_be_the_secret():
    """Byte by byte: nothing of the secret goes out before the masker knows; text that cannot
    start the secret is not held (live output stays live)."""
    masker = StreamMasker(("abcabd",))
    shown = [masker.feed(bytes([b])) for b in b"xabcabcabdy"]
    assert "".join(shown) + masker.flush() == "xabc***y"
    assert shown[0] == "x"
    assert masker.feed(b"abcab") == "" and masker.flush() == "abcab"  # a prefix alone is no secret


def test_a_secret_deep_or_behind_a_cycle_is_found_without_recursion():
    """A secret 100,000 levels down is found (no RecursionError); a cyclic value ends."""
    deep: list[object] = [f"pre{SECRET}"]
    for _ in range(100_000):
        deep = [deep]
    cyclic: list[object] = ["nothing"]
    cyclic.append(cyclic)
    assert holds_secret(deep, (SECRET,)) and holds_secret({"k": (1, cyclic, deep)}, (SECRET,))
    assert not holds_secret(cyclic, (SECRET,))


def test_a_secret_written_piecemeal_on_both_streams_never_shows(
    secret, no_leaked_containers, isolation
):
    """Char by char with flush, byte by byte with os.write, and padded to cross 4/32/64 KiB
    frames, on stdout and stderr: masked in the live events, the record and its bundle."""
    code = (
        "import os, sys, time\n"
        "t = os.environ['JSBX_TOKEN']\n"
        "for c in t:\n"
        "    for s in (sys.stdout, sys.stderr):\n"
        "        s.write(c); s.flush()\n"
        "    time.sleep(0.005)\n"  # so the engine sends each piece in a frame of its own
        "for b in t.encode():\n"
        "    os.write(1, bytes([b])); os.write(2, bytes([b]))\n"
        "    time.sleep(0.005)\n"
        "for size in (4096, 32768, 65536):\n"
        "    for fd in (1, 2):\n"
        "        data = b'x' * (size - 3) + t.encode() + b'\\n'\n"
        "        while data:\n"  # a write may take less than all (gVisor's, of 64 KiB)
        "            data = data[os.write(fd, data) :]\n"
    )
    events: list[object] = []
    run = create("leak", code=code, secrets=["JSBX_TOKEN"]).execute({}, on_event=events.append)
    live = [e.text for e in events if isinstance(e, Output)]
    assert not _shows(secret, *live, run.stdout, run.stderr, _everything_shown(run.to_record()))
    for stream in (run.stdout, run.stderr):  # the writes arrived, masked, padding and all
        assert stream.count("***") == 5 and stream.count("x") == 4093 + 32765 + 65533


def test_a_secret_in_a_traceback_is_masked_in_the_error(secret, no_leaked_containers, isolation):
    """The error's message, its stderr tail and its record carry the mask, not the value."""
    sandbox = create(
        "raise",
        code="import os\nraise RuntimeError(os.environ['JSBX_TOKEN'])",
        secrets=["JSBX_TOKEN"],
    )
    with pytest.raises(NonZeroExit) as caught:
        sandbox.run()
    err = caught.value
    assert "RuntimeError: ***" in str(err)
    assert not _shows(secret, str(err), err.stderr_tail, _everything_shown(err.record))


def test_a_secret_in_an_output_that_does_not_parse_is_masked_in_the_error(
    secret, no_leaked_containers, isolation
):
    """Verbatim code writes the secret where an int was declared: the parse error names the
    output, not the value."""
    code = "import os\nopen('/var/outputs/n', 'w').write(os.environ['JSBX_TOKEN'])"
    sandbox = create("bad", code=code, outputs={"n": int}, auto_io=False, secrets=["JSBX_TOKEN"])
    with pytest.raises(InvalidOutput) as caught:
        sandbox.run()
    assert "'n'" in str(caught.value)
    assert not _shows(secret, str(caught.value), _everything_shown(caught.value.record))


def test_an_output_holding_a_secret_is_hidden_in_record_and_live_view_but_returned(
    secret, monkeypatch, no_leaked_containers, isolation
):
    """The variable gets the real value (the code was asked for it); every preview of it, in
    the record, its bundle and the live view's event, shows `HIDDEN` instead. Numbers too."""
    monkeypatch.setenv("JSBX_PIN", "987654321987")
    code = (
        "import os\n"
        "t = os.environ['JSBX_TOKEN']\n"
        "same = t\n"
        "nested = {'k': ['x', 'pre' + t + 'post']}\n"
        "blob = t.encode()\n"
        "pin = int(os.environ['JSBX_PIN'])\n"
        "plain = 'nothing to hide'\n"
    )
    outputs = {"same": str, "nested": dict, "blob": bytes, "pin": int, "plain": str}
    sandbox = create("out", code=code, outputs=outputs, secrets=["JSBX_TOKEN", "JSBX_PIN"])
    events: list[object] = []
    run = sandbox.execute({}, on_event=events.append)
    assert run.outputs["same"] == secret and run.outputs["pin"] == 987654321987
    assert run.secrets == ()  # the run kept in the notebook no longer holds the values
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    live = [preview(value) for value in finished.outputs.values()]
    record = run.to_record()
    shown = [*live, _everything_shown(record)]
    assert not _shows(secret, *shown) and not any("987654321987" in text for text in shown)
    previews = {name: out["preview"] for name, out in record["outputs"].items()}
    assert previews == {
        **dict.fromkeys(["same", "nested", "blob", "pin"], HIDDEN),
        "plain": "'nothing to hide'",
    }
    assert live == [HIDDEN] * 4 + ["'nothing to hide'"]


def test_the_result_cache_is_private_and_misses_when_a_secret_changes(
    secret, monkeypatch, tmp_path, no_leaked_containers, isolation
):
    """Cached entries are 0600 in a 0700 folder, hold no secret (transcripts are masked, the
    key is an HMAC), and a run whose secret changed is run again, not served the old outputs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    results = tmp_path / "jupyter-sandbox" / "results"
    results.mkdir(parents=True)
    results.chmod(0o755)  # as an older version left it
    code = "import os\nt = os.environ['JSBX_TOKEN']\nprint(t)\nn = len(t)"
    sandbox = create("cached", code=code, outputs={"n": int}, secrets=["JSBX_TOKEN"], cache="auto")
    first, again = sandbox.execute({}), sandbox.execute({})
    assert (first.cached, again.cached, again.outputs["n"]) == (False, True, len(secret))
    monkeypatch.setenv("JSBX_TOKEN", "other")
    changed = sandbox.execute({})
    assert (changed.cached, changed.outputs["n"]) == (False, len("other"))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 3  # the HMAC key and two entries
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        data = path.read_bytes()
        assert secret.encode() not in data and b"other" not in data and secret not in path.name
    assert stat.S_IMODE(results.stat().st_mode) == 0o700


def _spellings(secret: str) -> list[bytes]:
    """The bytes a file may hold the secret as: every form masking knows (raw, ``repr``,
    JSON-escaped), HTML-escaped, and base64 at each of its three alignments (the cache
    encodes outputs in base64: the secret's bytes starting at any offset of a 3-byte group)."""
    raw = secret.encode()
    aligned = [raw[o : o + 3 * ((len(raw) - o) // 3)] for o in range(3)]
    texts = [*forms([secret]), html.escape(secret)]
    return [*(t.encode() for t in texts), *(base64.b64encode(a) for a in aligned)]


def _files_holding(secret: str, *folders: Path) -> list[str]:
    """Files under ``folders`` whose bytes (or names) hold the secret in any `_spellings`."""
    spellings = _spellings(secret)
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file()]
    assert files  # something was written: the search below can fail
    return [
        str(p) for p in files if any(s in p.read_bytes() or s in str(p).encode() for s in spellings)
    ]


def test_a_result_holding_a_secret_is_never_cached_nor_stored_on_disk(
    secret, monkeypatch, tmp_path, no_leaked_containers, isolation
):
    """A sandbox with ``cache="auto"`` whose output is the secret (plain, as bytes, deep in
    JSON) wrote it into the cache file, base64-encoded where masking never looks, to be kept
    after the kernel is gone. Now such a result is not cached, the record says so, and the
    next run runs again; a result without the secret is still cached. Used as a tool of a
    durable orchestration, neither the cache nor the store's files hold it either."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code = (
        "import os\nt = os.environ['JSBX_TOKEN']\nraw = t.encode()\ndeep = {'k': [1, {'v': t}]}\n"
    )
    leaky = create(
        "leaky",
        code=code,
        outputs={"t": str, "raw": bytes, "deep": "json"},
        secrets=["JSBX_TOKEN"],
        cache="auto",
    )
    first, again = leaky.execute({}), leaky.execute({})
    assert first.outputs["t"] == secret and first.outputs["deep"] == {"k": [1, {"v": secret}]}
    assert (first.cached, again.cached) == (False, False)  # nothing kept: ran again
    for run in (first, again):
        assert run.to_record()["uncached"] == _cache.NOT_KEPT
    honest = create(
        "honest",
        code="import os\nn = len(os.environ['JSBX_TOKEN'])",
        outputs={"n": int},
        secrets=["JSBX_TOKEN"],
        cache="auto",
    )
    kept, replayed = honest.execute({}), honest.execute({})
    assert (kept.cached, replayed.cached, replayed.outputs["n"]) == (False, True, len(secret))
    assert "uncached" not in kept.to_record()
    store = tmp_path / "store" / "store.sqlite"
    store.parent.mkdir()
    code = "found = await leaky()\nlen(found[0])"
    result = orchestrate(code, tools=[tool(leaky)], store=store)
    assert result.value == len(secret)
    assert _files_holding(secret, tmp_path / "cache", store.parent) == []


def _sandbox_pids(engine) -> list[int]:
    """Host pids of this process' sandbox container, once the run's ``sleep 30`` is in it."""
    labels = [f"{_client.KIND}=run", f"{_client.OWNER_PID}={os.getpid()}"]
    deadline = time.monotonic() + _BOUND
    while time.monotonic() < deadline:
        for found in engine.api.containers(filters={"label": labels}):
            with contextlib.suppress(docker.errors.APIError):  # a spare starting or going
                top = engine.api.top(found["Id"])
                if any(p[-1] == "sleep 30" for p in top["Processes"]):
                    column = top["Titles"].index("PID")
                    return [int(p[column]) for p in top["Processes"]]
        time.sleep(0.1)
    raise AssertionError("the run's process never started")


@contextlib.contextmanager
def _sleeping_run(isolation: str) -> Iterator[None]:
    """A run of ``sleep 30`` holding the secret, going on in a thread until the block ends
    (then cancelled: the container is removed)."""
    cancel = threading.Event()
    ended: list[BaseException] = []
    sandbox = create("sleepy", command=["sleep", "30"], secrets=["JSBX_TOKEN"], isolation=isolation)

    def run() -> None:
        try:
            sandbox.execute({}, cancel=cancel)
        except BaseException as exc:
            ended.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        yield
    finally:
        cancel.set()
        worker.join(_BOUND)
    assert not worker.is_alive() and [type(e) for e in ended] == [SandboxCancelled]


_AS_1000 = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]


def test_no_host_user_but_root_can_read_a_running_sandboxs_secret(
    secret, docker_engine, no_leaked_containers
):
    """Read /proc/<pid>/environ of every process of a running sandbox: root finds the secret
    (so the attack aims right); uid 1000 (the image's user, and most desktops' first human) is
    refused; the processes' uid belongs to no host account at all."""
    with _sleeping_run("container"):
        pids = _sandbox_pids(docker_engine)
        environs = [Path(f"/proc/{pid}/environ").read_bytes() for pid in pids]
        assert any(secret.encode() in env for env in environs)
        for pid in pids:
            read = subprocess.run([*_AS_1000, "cat", f"/proc/{pid}/environ"], capture_output=True)
            assert read.returncode != 0 and secret.encode() not in read.stdout, pid
            uid = int(Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0])
            with pytest.raises(KeyError):
                pwd.getpwuid(uid)
            assert _pool.UID_BASE <= uid < _pool.UID_BASE + _pool.UID_SPAN


def _gvisor_sandbox(engine) -> tuple[str, list[int]]:
    """This process' gVisor container once the run's ``sleep 30`` runs in it (two sleeps:
    the container's own and the run's), and the host pids of its runsc processes (the Sentry,
    the gofer: the code's processes exist only inside the Sentry)."""
    labels = [f"{_client.KIND}=run", f"{_client.OWNER_PID}={os.getpid()}"]
    roots = [d for r in STATE_ROOTS for d in Path(r).glob("runtime-*/moby")]
    deadline = time.monotonic() + _BOUND
    while time.monotonic() < deadline:
        for found in engine.api.containers(filters={"label": labels}):
            for root in roots:
                ps = subprocess.run(
                    ["runsc", "--root", str(root), "ps", found["Id"]],
                    capture_output=True,
                    text=True,
                )
                if ps.stdout.split().count("sleep") == 2:
                    return found["Id"], [
                        int(p.parent.name)
                        for p in Path("/proc").glob("[0-9]*/cmdline")
                        if found["Id"].encode() in _read(p) and b"runsc" in _read(p)
                    ]
        time.sleep(0.1)
    raise AssertionError("the run's process never started")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # a process that ended meanwhile
        return b""


def test_under_gvisor_no_host_process_holds_a_running_sandboxs_secret(
    secret, docker_engine, no_leaked_containers
):
    """Under gVisor the code's processes are the Sentry's, not the host's: the secret is in the
    environment of the run's process inside the sandbox (so the attack aims right), in the
    environment of no host process of the sandbox, and uid 1000 can read neither their
    environment nor their memory."""
    with _sleeping_run("gvisor"):
        container, pids = _gvisor_sandbox(docker_engine)
        inside = docker_engine.containers.get(container).exec_run(
            ["sh", "-c", "cat /proc/[0-9]*/environ"]
        )
        assert secret.encode() in inside.output
        assert pids, "no runsc process of the sandbox on the host"
        for pid in pids:
            assert secret.encode() not in _read(Path(f"/proc/{pid}/environ")), pid
            for what in ("environ", "mem"):
                read = subprocess.run(
                    [*_AS_1000, "head", "-c", "1", f"/proc/{pid}/{what}"], capture_output=True
                )
                assert read.returncode != 0, (pid, what)


def _cell_messages(client, code: str, **kwargs) -> tuple[list[dict], dict]:
    """Every iopub message of one cell until the kernel is idle again, and the reply."""
    msg_id = client.execute(code, **kwargs)
    seen = []
    while True:
        msg = client.get_iopub_msg(timeout=_BOUND)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        seen.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return seen, client.get_shell_msg(timeout=_BOUND)


def test_a_secret_never_reaches_the_notebook_from_a_real_kernel(docker_engine, isolation):
    """In a real kernel, ``%%sandbox --secret``: no iopub message (live stream, widget state,
    final bundle, error) carries the secret, written piecemeal on both streams, returned as an
    output or raised; the notebook variable still holds the real value."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(
        kernel_name="python3", env={**os.environ, "JSBX_TOKEN": SECRET}
    )
    try:
        client.execute_interactive("%load_ext jupyter_sandbox", timeout=_BOUND)
        leaky = (
            "%%sandbox --secret JSBX_TOKEN --out same\n"
            "import os, sys, time\n"
            "same = os.environ['JSBX_TOKEN']\n"
            "for c in same:\n"
            "    for s in (sys.stdout, sys.stderr):\n"
            "        s.write(c); s.flush()\n"
            "    time.sleep(0.005)\n"  # each piece in a frame (and a message) of its own
        )
        check = {"real": "same == __import__('os').environ['JSBX_TOKEN']"}
        messages, reply = _cell_messages(client, leaky, user_expressions=check)
        assert reply["content"]["user_expressions"]["real"]["data"]["text/plain"] == "True"
        raising = (
            "%%sandbox --secret JSBX_TOKEN\nimport os\nraise RuntimeError(os.environ['JSBX_TOKEN'])"
        )
        failed, _ = _cell_messages(client, raising)
        assert any(m["msg_type"] == "error" for m in failed)
        streamed = [m["content"]["text"] for m in messages if m["msg_type"] == "stream"]
        assert "".join(streamed).count("***") == 2  # the writes did reach the cell, masked
        assert not _shows(SECRET, json.dumps(messages + failed, ensure_ascii=False, default=str))
    finally:
        manager.shutdown_kernel(now=False)
        client.stop_channels()


def test_the_containers_own_uid_still_has_a_name_a_home_and_writable_places(
    no_leaked_containers, isolation
):
    """The uid no host account has is no account in the image either: libraries asking
    ``getpass.getuser()`` still get a name, ``~`` is writable, and so are /tmp and outputs."""
    code = (
        "import getpass, os, pathlib\n"
        "name = getpass.getuser()\n"
        "pathlib.Path('~/probe').expanduser().write_text('ok')\n"
        "home = os.path.expanduser('~')\n"
        "uid = os.getuid()\n"
        "uid_map = [line.split() for line in open('/proc/self/uid_map')]\n"
    )
    outputs = {"name": str, "home": str, "uid": int, "uid_map": list}
    name, home, uid, uid_map = create("who", code=code, outputs=outputs).run()
    assert (name, home) == ("sandbox", "/tmp")
    # the host's uid of it (rootless Podman: one of its user's subordinate ids)
    host = next(
        int(out) + uid - int(start) for start, out, n in uid_map if 0 <= uid - int(start) < int(n)
    )
    with pytest.raises(KeyError):
        pwd.getpwuid(host)


def test_sandbox_uids_never_meet_monty_worker_uids_or_host_accounts():
    """A sandbox process sharing a uid with a Monty worker could read that worker's memory
    (and the other way round): the two reserved ranges must not overlap, and none of ours may
    belong to an account of this host."""
    from jupyter_sandbox.orchestration._confine import WORKER_IDS

    ours = range(_pool.UID_BASE, _pool.UID_BASE + _pool.UID_SPAN)
    assert ours.stop <= 2**31 and (ours.stop <= WORKER_IDS.start or WORKER_IDS.stop <= ours.start)
    assert not [user.pw_name for user in pwd.getpwall() if user.pw_uid in ours]


def test_a_uid_delegated_to_a_host_user_is_never_a_containers(tmp_path, monkeypatch):
    """The owner of a subordinate range can become its ids in a user namespace: a container
    never gets one; a reserved range all delegated is one clear error, not a hang."""
    half = _pool.UID_SPAN // 2
    subuid = tmp_path / "subuid"
    subuid.write_text(f"alice:{_pool.UID_BASE}:{half}\nbroken line\n")
    monkeypatch.setattr(_pool, "SUBORDINATE_FILES", (str(subuid), str(tmp_path / "absent")))
    assert all(_pool.fresh_uid() >= _pool.UID_BASE + half for _ in range(200))
    subuid.write_text(f"alice:{_pool.UID_BASE - 5}:{_pool.UID_SPAN + 10}\n")
    with pytest.raises(ContainerError, match="no free uid"):
        _pool.fresh_uid()
