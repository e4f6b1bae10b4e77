"""Durable runs in the engine: checkpoints, resume from a snapshot in a new
process, the in-flight rule, approval gates and forks, with real Monty workers and a real SQLite
store in tmp_path. Host-side counters (files, shared by every process) prove which calls ran."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_sandbox import Store, fork_run, orchestrate, resume_run
from jupyter_sandbox.errors import OrchestrationError, SandboxConfigError, StoreError
from jupyter_sandbox.orchestration import Tool
from jupyter_sandbox.orchestration.durable._durable import CHECKPOINT_EVERY

# The tools live in a module of their own so a second process can import the same ones. Each
# call appends its name to the file $COUNTS; `die` kills its process with SIGKILL when
# $DIE_IN names it (a kernel killed mid-run).
TOOLS = textwrap.dedent(
    """
    import asyncio, os, signal, sqlite3, time

    def _count(name):
        with open(os.environ["COUNTS"], "a") as f:
            f.write(name + "\\n")
        if os.environ.get("DIE_IN") == name:
            _stored(int(os.environ.get("DIE_AFTER_STORED", "0")))
            os.kill(os.getpid(), signal.SIGKILL)

    def _stored(n):
        # wait until the store holds n call records (a durable run writes them within a
        # second of their end, on a timer's thread)
        while n:
            with sqlite3.connect(os.environ["STORE"]) as db:
                (found,) = db.execute("SELECT count(*) FROM calls WHERE idx >= 0").fetchone()
            if found >= n:
                return
            time.sleep(0.05)

    def step(x: int) -> int:
        _count("step")
        return x * 2

    async def slow(x: int) -> int:
        await asyncio.sleep(0.05)
        _count("slow")
        return x + 1

    def delete(path: str) -> str:
        _count("delete")
        return "deleted " + path

    async def adelete(path: str) -> str:
        _count("adelete")
        return "deleted " + path
    """
)

PYTHON = sys.executable


@pytest.fixture
def env(tmp_path, monkeypatch):
    """The tools module importable, the counter file, and a store, all in tmp_path."""
    (tmp_path / "durable_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COUNTS", str(tmp_path / "counts"))
    monkeypatch.delenv("DIE_IN", raising=False)
    import durable_tools

    yield tmp_path, durable_tools
    sys.modules.pop("durable_tools", None)


def counts(tmp_path: Path) -> dict[str, int]:
    path = tmp_path / "counts"
    names = path.read_text().split() if path.exists() else []
    return {name: names.count(name) for name in set(names)}


def tools(mod, *, gated: bool = True) -> list[Tool]:
    return [
        Tool(mod.step),
        Tool(mod.slow),
        Tool(mod.delete, approve=gated),
        Tool(mod.adelete, approve=lambda path: path.startswith("/data")),
    ]


def in_new_process(tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh Python with the tools importable and the same counter file."""
    full = f"import sys, json\nsys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(script)
    return subprocess.run(
        [PYTHON, "-c", full],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


GATED = """
print("before")
x = step(1)
y = await slow(x)
r = delete("/tmp/a")
print("after")
[x, y, r, step(10)]
"""


def test_a_gated_call_pauses_and_a_new_process_resumes_it_without_rerunning_the_code(env):
    tmp_path, mod = env
    store = tmp_path / "store.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    assert paused.status == "paused" and paused.value is None
    assert [(c.tool, c.args) for c in paused.pending] == [("delete", ("/tmp/a",))]
    assert paused.stdout == "before\n"
    record = paused.to_record()
    assert record["status"] == "paused" and record["run_id"] == paused.run_id
    assert [c["tool"] for c in record["pending"]] == ["delete"]
    assert counts(tmp_path) == {"step": 1, "slow": 1}
    assert Store(store).run(paused.run_id).status == "paused"

    done = in_new_process(
        tmp_path,
        f"""
        import durable_tools as m
        from jupyter_sandbox import resume_run
        from jupyter_sandbox.orchestration import Tool
        tools = [Tool(m.step), Tool(m.slow), Tool(m.delete, approve=True)]
        result = resume_run({paused.run_id!r}, approve=True, store={str(store)!r}, tools=tools)
        print(json.dumps([result.status, result.run_id, result.value, result.stdout]))
        """,
    )
    assert done.returncode == 0, done.stderr
    status, run_id, value, stdout = json.loads(done.stdout.splitlines()[-1])
    assert (status, run_id, value) == ("ok", paused.run_id, [2, 3, "deleted /tmp/a", 20])
    assert stdout == "after\n"  # the code before the pause did not run again
    assert counts(tmp_path) == {"step": 2, "slow": 1, "delete": 1}  # step(10) is new
    assert Store(store).run(paused.run_id).status == "ok"


def test_a_rejected_call_raises_permission_error_that_the_code_may_catch(env):
    tmp_path, mod = env
    code = (
        "try:\n"
        "    r = delete('/tmp/b')\n"
        "except PermissionError as e:\n"
        "    r = 'refused: ' + str(e)\n"
        "r"
    )
    paused = orchestrate(code, tools=tools(mod), store=tmp_path / "s.sqlite")
    result = resume_run(
        paused.run_id,
        approve=False,
        reason="not today",
        store=tmp_path / "s.sqlite",
        tools=tools(mod),
    )
    assert result.value == "refused: not today"
    assert result.trace[-1].error == "PermissionError: not today"
    assert "delete" not in counts(tmp_path)


def test_an_approver_answers_inline_and_a_predicate_gates_only_some_calls(env):
    tmp_path, mod = env
    asked: list[tuple[str, tuple]] = []

    def approver(call) -> bool:
        asked.append((call.tool, call.args))
        return call.args[0] != "/data/keep"

    code = (
        "import asyncio\n"
        "out = []\n"
        "for p in ['/tmp/x', '/data/old', '/data/keep']:\n"
        "    try:\n"
        "        out.append(await adelete(p))\n"
        "    except PermissionError as e:\n"
        "        out.append('no')\n"
        "out"
    )
    result = orchestrate(code, tools=tools(mod), approver=approver)
    assert result.status == "ok" and result.run_id is None
    assert result.value == ["deleted /tmp/x", "deleted /data/old", "no"]
    assert asked == [("adelete", ("/data/old",)), ("adelete", ("/data/keep",))]
    assert counts(tmp_path) == {"adelete": 2}


def test_a_gated_call_without_store_or_approver_fails_saying_what_to_pass(env):
    tmp_path, mod = env
    with pytest.raises(OrchestrationError, match=r"delete\(\) needs approval.*approver=.*store="):
        orchestrate("step(1)\ndelete('/tmp/c')", tools=tools(mod))
    assert counts(tmp_path) == {"step": 1}


def test_a_gated_call_inside_gather_pauses_and_resumes_with_its_siblings_answered(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    code = "import asyncio\nawait asyncio.gather(slow(1), adelete('/data/x'), slow(3))"
    paused = orchestrate(code, tools=tools(mod), store=store)
    assert paused.status == "paused"
    assert [c.tool for c in paused.pending] == ["adelete"]
    # slow(1) was in flight when the run paused: it finished and was recorded first
    assert counts(tmp_path) == {"slow": 1}
    result = resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    assert result.value == [2, "deleted /data/x", 4]
    assert counts(tmp_path) == {"slow": 2, "adelete": 1}  # slow(1) answered from the store
    replayed = {c.args: c.replayed for c in result.trace}
    assert replayed == {(1,): True, ("/data/x",): False, (3,): False}


CRASH = """
import asyncio
a = await slow(1)
b = await slow(a)
step(b)
"""


def crash(tmp_path: Path, store: Path, die_in: str, stored: int = 0, every: float = 1.0) -> str:
    """Run CRASH durably in a process that is killed (SIGKILL) in tool ``die_in``, once the
    store holds ``stored`` call records; records are written every ``every`` seconds (and
    with each checkpoint). The run's id."""
    killed = in_new_process(
        tmp_path,
        f"""
        import durable_tools as m
        from jupyter_sandbox import orchestrate
        from jupyter_sandbox.orchestration.durable import _durable
        _durable.CHECKPOINT_EVERY = {every!r}
        orchestrate({CRASH!r}, tools=[m.step, m.slow], store={str(store)!r}, cell="crash")
        """,
        DIE_IN=die_in,
        DIE_AFTER_STORED=str(stored),
        STORE=str(store),
    )
    assert killed.returncode == -9, killed.stderr
    (info,) = Store(store).runs()
    assert info.status == "running"  # it never ended
    return info.run_id


def test_in_flight_rule_a_call_that_completed_before_the_kill_is_not_made_again(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    # both slow calls completed and their records were written (within a second)
    run_id = crash(tmp_path, store, die_in="step", stored=2)
    assert counts(tmp_path) == {"slow": 2, "step": 1}
    result = resume_run(run_id, store=store, tools=[mod.step, mod.slow])
    assert result.value == 6
    assert counts(tmp_path) == {"slow": 2, "step": 2}  # only the unfinished step again
    assert [c.replayed for c in result.trace] == [True, True, False]


def test_a_kill_loses_the_records_not_written_yet_and_those_calls_are_made_again(env):
    """Records are written with checkpoints or once a second, not per call: killed before
    either (the interval made an hour), the calls since the first checkpoint (before call 0)
    are made again on resume; the code before it is not run again."""
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    run_id = crash(tmp_path, store, die_in="step", every=3600.0)
    assert counts(tmp_path) == {"slow": 2, "step": 1}
    stored = Store(store).run(run_id)
    assert stored.checkpoint is not None and stored.checkpoint.call_index == 0
    assert [i for i in stored.calls if i >= 0] == []  # nothing written since
    result = resume_run(run_id, store=store, tools=[mod.step, mod.slow])
    assert result.value == 6
    assert counts(tmp_path) == {"slow": 4, "step": 2}
    assert sorted(Store(store).run(run_id).calls) == [-1, 0, 1, 2]  # the end wrote them all


def test_in_flight_rule_a_call_that_had_not_completed_is_made_again(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    run_id = crash(tmp_path, store, die_in="slow")  # killed inside the first slow call
    assert counts(tmp_path) == {"slow": 1}
    result = orchestrate(CRASH, tools=[mod.step, mod.slow], store=store, cell="crash", resume=True)
    assert result.run_id == run_id and result.value == 6
    assert counts(tmp_path) == {"slow": 3, "step": 1}


def test_a_tampered_checkpoint_is_refused(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    with sqlite3.connect(store) as db:
        (payload,) = db.execute("SELECT payload FROM checkpoints").fetchone()
        flipped = bytes([payload[0] ^ 1]) + payload[1:]
        db.execute("UPDATE checkpoints SET payload = ?", (flipped,))
    with pytest.raises(StoreError, match="modified outside jupyter-sandbox"):
        resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    assert "delete" not in counts(tmp_path)


def test_fork_answers_earlier_calls_from_the_store_and_call_n_with_the_value(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    code = "a = step(x)\nb = await slow(a)\nc = step(b)\n[a, b, c]"
    first = orchestrate(code, tools=tools(mod), inputs={"x": 1}, store=store)
    assert first.value == [2, 3, 6]
    assert counts(tmp_path) == {"step": 2, "slow": 1}
    fork = fork_run(first.run_id, 1, value=100, store=store, tools=tools(mod))
    assert fork.value == [2, 100, 200]
    assert counts(tmp_path) == {"step": 3, "slow": 1}  # only the call after N was made
    assert [c.replayed for c in fork.trace] == [True, True, False]
    assert fork.forked_from == (first.run_id, 1) and fork.run_id != first.run_id
    assert fork.to_record()["forked_from"] == {"run_id": first.run_id, "call": 1}
    assert Store(store).run(fork.run_id).forked_from == (first.run_id, 1)
    with pytest.raises(SandboxConfigError, match="no call #3; it made calls #0, #1, #2"):
        fork_run(first.run_id, 3, value=0, store=store, tools=tools(mod))


def test_resume_run_says_what_is_missing(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    with pytest.raises(SandboxConfigError, match="approve=True or approve=False"):
        resume_run(paused.run_id, store=store, tools=tools(mod))
    with pytest.raises(StoreError, match="not registered now: delete"):
        resume_run(paused.run_id, approve=True, store=store, tools=[mod.step, mod.slow])
    with pytest.raises(StoreError, match="no run 'nope'"):
        resume_run("nope", store=store)
    done = resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    with pytest.raises(StoreError, match=r"ended ok.*fork_run"):
        resume_run(done.run_id, store=store, tools=tools(mod))


def test_an_object_held_across_a_restore_is_named_not_handed_over(env, durable_process):
    """Not given again, the input the handle came from is named (`test_durable_handles`)."""
    tmp_path, mod = env

    class Frame:
        pass

    def use(obj: Frame) -> str:
        return type(obj).__name__

    store = tmp_path / "s.sqlite"
    code = "delete('/tmp/d')\nuse(df)"
    listed = [*tools(mod), Tool(use)]
    paused = orchestrate(code, tools=listed, inputs={"df": Frame()}, store=store)
    durable_process.forget()  # a kernel restart: in the process that paused, the object is bound
    with pytest.raises(StoreError, match=r"needs notebook variable `df` \(a .*Frame handle\)"):
        resume_run(paused.run_id, approve=True, store=store, tools=listed)


def test_without_a_store_nothing_is_written_and_nothing_changes(env, monkeypatch):
    tmp_path, mod = env
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_path / "default.sqlite"))
    result = orchestrate("await slow(step(1))", tools=tools(mod))
    assert (result.status, result.run_id, result.pending, result.value) == ("ok", None, [], 3)
    record = result.to_record()
    assert not {"run_id", "pending", "forked_from"} & set(record)
    assert not (tmp_path / "default.sqlite").exists()


def test_a_fork_needs_an_input_the_store_could_not_keep_given_again(env):
    tmp_path, mod = env

    class Frame:
        pass

    def size(obj: Frame, n: int) -> int:
        return n * 2

    store = tmp_path / "s.sqlite"
    listed = [*tools(mod), Tool(size)]
    code = "a = size(df, n)\nb = step(a)\n[a, b]"
    first = orchestrate(code, tools=listed, inputs={"df": Frame(), "n": 3}, store=store)
    assert first.value == [6, 12]
    with pytest.raises(StoreError, match=r"variable `df` \(a .*Frame handle\).*inputs="):
        fork_run(first.run_id, 1, value=0, store=store, tools=listed)
    fork = fork_run(first.run_id, 0, value=7, store=store, tools=listed, inputs={"df": Frame()})
    assert fork.value == [7, 14]  # n=3 came from the store; call 0 is the value given


def test_resume_with_edited_code_answers_the_calls_it_repeats_from_the_store(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    failing = "a = step(1)\nb = await slow(a)\nc = 1 / 0\n[a, b]"
    with pytest.raises(OrchestrationError, match="ZeroDivisionError"):
        orchestrate(failing, tools=tools(mod), store=store, cell="c1")
    assert counts(tmp_path) == {"step": 1, "slow": 1}
    fixed = failing.replace("1 / 0", "step(b)")
    result = orchestrate(fixed, tools=tools(mod), store=store, cell="c1", resume=True)
    assert result.value == [2, 3]
    assert counts(tmp_path) == {"step": 2, "slow": 1}  # a and b from the failed run's records
    assert [c.replayed for c in result.trace] == [True, True, False]


def test_a_paused_run_is_continued_once_when_two_answers_race(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    stale = Store(store).run(paused.run_id)  # what a second kernel read before the first went on

    def answer() -> str:
        try:
            return resume_run(paused.run_id, approve=True, store=store, tools=tools(mod)).status
        except (StoreError, SandboxConfigError) as exc:
            return type(exc).__name__

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = sorted(pool.map(lambda _: answer(), range(2)))
    assert outcomes[1] == "ok" and outcomes[0] != "ok", outcomes
    assert counts(tmp_path)["delete"] == 1
    assert not Store(store).claim(stale.run_id, stale.status)


def test_a_sleep_awaited_beside_a_gated_call_is_over_once_the_run_resumes(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    code = "import asyncio\nawait asyncio.gather(asyncio.sleep(0.2), adelete('/data/y'))"
    paused = orchestrate(code, tools=tools(mod), store=store)
    assert paused.status == "paused"
    result = resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    assert result.value == [None, "deleted /data/y"]


class CountingStore(Store):
    """A real store that counts the checkpoints written to it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.checkpoints = 0

    def checkpoint(self, run_id, **kwargs):  # type: ignore[no-untyped-def]
        self.checkpoints += 1
        super().checkpoint(run_id, **kwargs)


def test_plain_calls_checkpoint_at_most_once_a_second_gated_calls_each_time(env):
    tmp_path, mod = env
    store = CountingStore(tmp_path / "s.sqlite")
    # 300 async calls at once (a gather): not 300 checkpoints, one per second of the run at most
    code = "import asyncio\nawait asyncio.gather(*[slow(i) for i in range(300)])"
    result = orchestrate(code, tools=[mod.slow], store=store, type_check=False)
    assert result.value == list(range(1, 301))
    assert 1 <= store.checkpoints <= 1 + result.duration / CHECKPOINT_EVERY
    # every record is written by the end, in batches
    assert sorted(store.run(result.run_id).calls) == list(range(-1, 300))
    # a gated call always checkpoints (a pause must be resumable), however recent the last
    store.checkpoints = 0
    code = "[await adelete('/data/' + str(i)) for i in range(5)]"
    gated = orchestrate(code, tools=tools(mod), store=store, approver=lambda call: True)
    assert len(gated.value) == 5 and store.checkpoints == 5
