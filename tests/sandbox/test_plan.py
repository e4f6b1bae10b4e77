"""The sandbox engine's plan (`sandbox._plan`): which backend, network and cache a run gets,
the combinations refused in one line, the staged inputs' fingerprint the cache keys on, and
the attempt loop driven through the `Backend` protocol."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox import Dir, File, SandboxConfigError, create
from jupyter_sandbox.sandbox import _plan, _sandbox
from jupyter_sandbox.sandbox._allowlist import allow_list
from jupyter_sandbox.sandbox._container import RawRun
from jupyter_sandbox.sandbox._plan import (
    NO_CACHE,
    AllowList,
    Attempt,
    Cache,
    DaskWorker,
    Engine,
    Plain,
    Plan,
    Route,
    plan,
    refuse,
    session_plan,
)
from jupyter_sandbox.sandbox._record import SandboxRun
from jupyter_sandbox.sandbox._staging import bind, stage


def _never() -> Any:
    raise AssertionError("a cluster's plan asked for the local engine")


@pytest.mark.parametrize(
    ("network", "cache", "chosen", "cached"),
    [
        ("none", "disable", Plain("none"), NO_CACHE),
        ("bridge", "auto", Plain("bridge"), Cache(replays=True, keeps=True)),
        ("none", "override", Plain("none"), Cache(replays=False, keeps=True)),
    ],
)
def test_a_local_run_gets_the_engine_with_a_plain_network(
    docker_engine, network, cache, chosen, cached
):
    sandbox = create("local", code="pass", network=network, cache=cache, timeout=7)
    chosen_plan = plan(sandbox)
    assert isinstance(chosen_plan.backend, Engine)
    assert chosen_plan.backend.docker.api.base_url == docker_engine.api.base_url  # this engine
    assert (chosen_plan.network, chosen_plan.cache) == (chosen, cached)
    spare = chosen_plan.backend.spare  # a fresh image's first spare starts on that network
    assert spare is not None and (spare.network, spare.timeout) == (network, 7)


def test_an_allow_list_gets_the_engine_and_no_spare_before_its_proxy(docker_engine):
    sandbox = create("listed", code="pass", network=["pypi.org"], cache="auto")
    chosen = plan(sandbox)
    assert isinstance(chosen.backend, Engine)
    assert isinstance(chosen.network, AllowList)
    assert chosen.network.fingerprint == "pypi.org"
    assert chosen.backend.spare is None  # its network is the proxy's, started by the first run
    assert chosen.cache == Cache(replays=True, keeps=True)


def test_a_cluster_gets_a_dask_worker_without_asking_the_local_engine():
    sandbox = create("remote", code="pass", cluster="tcp://127.0.0.1:1", network="bridge")
    chosen = plan(sandbox, connect=_never)
    assert isinstance(chosen.backend, DaskWorker)
    assert chosen.backend.network == Plain("bridge") == chosen.network
    assert chosen.cache == NO_CACHE
    assert chosen.backend.prepare(SandboxRun(name="remote", image="x"), print) == repr(
        sandbox.image_spec
    )  # each worker has its own image ids: the spec names the image in a cache key


def test_a_session_is_planned_as_a_run_on_this_engine_and_never_cached(docker_engine):
    """A session's image and route come from a run's backend and network strategy (`plan`);
    what a session cannot keep is refused in one line, before the engine is asked."""
    chosen = session_plan(create("session", code="pass", network=["pypi.org"]))
    assert isinstance(chosen.backend, Engine) and chosen.docker is chosen.backend.docker
    assert chosen.network == AllowList(allow_list(["pypi.org"]))
    for box, says in (
        (create("cached", code="pass", cache="auto"), "never cached"),
        (create("remote", code="pass", cluster="tcp://127.0.0.1:1"), "drop cluster"),
    ):
        with pytest.raises(SandboxConfigError, match=says):
            session_plan(box, connect=_never)


@pytest.mark.parametrize(
    ("network", "isolation", "cluster", "says"),
    [
        (("pypi.org",), "gvisor", None, "network 'an allow-list' needs isolation 'container'"),
        ("bridge", "gvisor", None, "network 'bridge' needs isolation 'container'"),
        (["pypi.org"], "container", "tcp://127.0.0.1:1", "an allow-listed network runs on this"),
    ],
)
def test_what_no_backend_keeps_is_refused_in_one_line(network, isolation, cluster, says):
    with pytest.raises(SandboxConfigError, match=says) as raised:
        create("x", code="pass", network=network, isolation=isolation, cluster=cluster)
    assert "\n" not in str(raised.value) and raised.value.parameter == "network"
    checked = network if isinstance(network, str) else allow_list(network)
    with pytest.raises(SandboxConfigError, match=says):  # what the plan asks first, too
        refuse(checked, isolation, cluster)


def test_an_allow_list_on_podman_is_refused_by_the_plan_in_one_line(on_podman):
    """The real rootless Podman service: the plan refuses before any image or container."""
    sandbox = create("x", code="pass", network=["pypi.org"])
    with pytest.raises(SandboxConfigError, match="needs Docker: Podman at unix://") as raised:
        plan(sandbox)
    assert "\n" not in str(raised.value)
    assert isinstance(plan(create("y", code="pass")).network, Plain)  # a plain network runs


def _tree_key_chunks(root: Path) -> list[bytes]:
    """What the result cache hashed of a run's inputs folder: every path under it, sorted,
    and each file's content digest (the staged files read again after staging)."""
    chunks = []
    for path in sorted(root.rglob("*")):
        chunks.append(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file():
            chunks.append(hashlib.sha256(path.read_bytes()).digest())
    return chunks


def _stage(work: Path, tags: dict[str, str], values: dict[str, Any], *, fingerprint: bool) -> Any:
    return stage(
        work,
        tags,
        values,
        mode="auto",
        code="pass",
        outputs={},
        ca_bundle=None,
        fingerprint=fingerprint,
    )


def test_the_fingerprint_taken_while_staging_is_what_the_staged_folder_hashes_to(tmp_path):
    """One pass: each input is digested as it is written, and the cache's key of the inputs
    is exactly the one a walk of the staged folder gives (entries kept before still hit)."""
    data = tmp_path / "data.bin"
    data.write_bytes(b"\0" * 70000 + b"tail")  # a block of zeros: written sparse, still hashed
    folder = tmp_path / "tree"
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "sub" / "deeper" / "leaf.txt").write_text("leaf")
    (folder / "a-b").write_text("sorts after the folder a")
    (folder / "sub" / "link").symlink_to("deeper/leaf.txt")
    values = {"n": 42, "text": "é", "a": File(data), "tree": Dir(folder), "when": None}
    declared: dict[str, str | None] = dict.fromkeys(values)
    tags = bind("s", declared, values)
    staged = _stage(tmp_path / "work", tags, values, fingerprint=True)
    assert list(staged.fingerprint) == _tree_key_chunks(staged.inputs)
    assert (staged.inputs / "a").read_bytes() == data.read_bytes()
    assert (staged.program / "runner.py").is_file()
    again = _stage(tmp_path / "again", tags, values, fingerprint=False)
    assert again.fingerprint == ()  # a run without a cache reads nothing twice
    assert sorted(os.listdir(again.inputs)) == sorted(values)


class _Backend:
    """A stand-in place to run, for the loop's own contract (the real engine's runs are in
    tests/sandbox/test_engine.py and the rest): it answers each attempt from ``answers``."""

    def __init__(self, *answers: RawRun) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []
        self.attempts: list[Attempt] = []

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        self.calls.append("hold")
        yield
        self.calls.append("released")

    def hold(self) -> contextlib.AbstractContextManager[None]:
        return self._held()

    def prepare(self, run: SandboxRun, emit: Any) -> str:
        self.calls.append("prepare")
        run.image = "stand-in:latest"
        return "sha256:stand-in"

    def join(self, emit: Any) -> Route:
        self.calls.append("join")
        return Route("stand-in-net", {"HTTP_PROXY": "http://proxy.invalid:3128"})

    def run(self, run: SandboxRun, attempt: Attempt) -> RawRun:
        self.calls.append("run")
        self.attempts.append(attempt)
        return self.answers.pop(0)


def _planned(monkeypatch: pytest.MonkeyPatch, backend: _Backend, cache: Any) -> None:
    def planned(sandbox: Any, injection: Any = None) -> Plan:
        return Plan(backend, Plain("none"), cache)

    monkeypatch.setattr(_sandbox, "plan", planned)


def test_the_loop_asks_its_backend_in_order_and_retries_a_failed_attempt(monkeypatch):
    backend = _Backend(RawRun(exit_code=1, stderr="boom\n"), RawRun(exit_code=0, stdout="hi\n"))
    _planned(monkeypatch, backend, NO_CACHE)
    sandbox = create("loop", code="print('hi')", retries=1, env_vars={"KEPT": "1"})
    run = sandbox.execute({})
    assert backend.calls == ["hold", "prepare", "join", "run", "run", "released"]
    assert (run.attempts, run.stdout, run.image) == (2, "hi\n", "stand-in:latest")
    first = backend.attempts[0]
    assert first.limits.network == "stand-in-net"  # the route's network, not the sandbox's
    assert first.env["HTTP_PROXY"] == "http://proxy.invalid:3128" and first.env["KEPT"] == "1"
    assert first.image == "stand-in:latest" and (first.inputs_dir / "..").resolve().is_dir()


def test_the_loop_answers_from_its_cache_without_asking_the_backend_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = _Backend(RawRun(exit_code=0, stdout="once\n"))
    _planned(monkeypatch, first, Cache(replays=True, keeps=True))
    sandbox = create("cached", code="print(x)", inputs={"x": int}, cache="auto")
    assert sandbox.execute({"x": 1}).stdout == "once\n"
    second = _Backend()  # nothing to answer: a run would fail the test
    _planned(monkeypatch, second, Cache(replays=True, keeps=True))
    replayed = sandbox.execute({"x": 1})
    assert replayed.cached and replayed.stdout == "once\n"
    assert second.calls == ["hold", "prepare", "released"]
    with pytest.raises(IndexError):  # another input is another key: it runs
        sandbox.execute({"x": 2})


def test_a_plan_is_what_the_engine_runs(docker_engine):
    """The real engine through the plan: a run, then its replay from the cache."""
    sandbox = create("real", code="y = x * 2", inputs={"x": int}, outputs={"y": int})
    assert isinstance(plan(sandbox).backend, Engine)
    assert sandbox.run(x=21) == 42
    assert _plan.container_setup(sandbox, "none") == sandbox._limits()
