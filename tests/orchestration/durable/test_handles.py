"""Opaque handles across a restart: a durable run names each handle it sends
into Monty, and a restored run binds an input's handle again from the object given now, by the
input's name, or names what is missing. Real Monty workers, a real SQLite store in tmp_path, and
real kernels killed with ``kill -9`` (`_kernels`). Tools count their calls, so a test sees
what was made again and what was not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic_monty as pm
import pytest
from _durable_kernels import alive, counted, descendants, the_run, wait_for
from _kernels import Kernel

from jupyter_sandbox import Store, fork_run, orchestrate, resume_run
from jupyter_sandbox.errors import OrchestrationError, StoreError
from jupyter_sandbox.orchestration import Tool


class Frame:
    """A stand-in for a DataFrame: an object Monty holds only as a handle."""

    def __init__(self, tag: str) -> None:
        self.tag = tag


FRAME = f"{__name__}.Frame"


class Calls:
    """The tools of these tests, counting their calls."""

    def __init__(self) -> None:
        self.made: Counter[str] = Counter()
        self.seen: list[Any] = []
        """The objects `use` was handed, in order."""

    def use(self, frame: object) -> str:
        self.made["use"] += 1
        self.seen.append(frame)
        return frame.tag  # type: ignore[attr-defined, no-any-return]

    def ask(self, n: int) -> int:
        self.made["ask"] += 1
        return n

    def make(self) -> object:
        self.made["make"] += 1
        return Frame("made")

    def tools(self) -> list[Tool]:
        return [Tool(self.use), Tool(self.ask, approve=True), Tool(self.make)]


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def paused(durable_process: Any) -> Callable[..., str]:
    """``paused(code, calls, store, **inputs)``: run ``code`` durably until its gated call
    ``ask`` pauses it (a checkpoint); its id. The objects it was given are then forgotten, as
    a kernel restart does (`durable_process`): in the process that paused, an approval gets
    those objects, whatever is given (`_durable.held`)."""

    def run(code: str, calls: Calls, store: Path, **inputs: Any) -> str:
        result = orchestrate(code, tools=calls.tools(), inputs=inputs, store=store)
        assert result.status == "paused", result.error
        assert result.run_id is not None
        durable_process.forget()
        return result.run_id

    return run


def test_monty_keeps_a_handles_uuid_across_a_dump():
    """What the design stands on: after ``load_snapshot`` the object is gone, and the
    sandbox's reference reaches the host as a proxy with the uuid the handle was sent with."""
    sent = pm.ClassInstance(Frame("x"))
    with pm.Monty() as monty:
        with monty.checkout() as session:
            snap = session.feed_start("use(df)\nuse([df, {'k': df}])", inputs={"df": sent})
            assert isinstance(snap, pm.FunctionSnapshot)
            assert snap.args[0] is sent.value  # the object itself, before a dump
            dump = snap.resume({"return_value": None}).dump()  # type: ignore[union-attr]
        with monty.checkout() as session:
            restored = session.load_snapshot(dump)
            assert isinstance(restored, pm.FunctionSnapshot)
            (items,) = restored.args
            restored.resume({"return_value": None})
    proxies = [items[0], items[1]["k"]]
    assert all(type(p) is pm.MontyClassProxy for p in proxies)
    assert {p.id for p in proxies} == {sent.id}
    assert {p.name for p in proxies} == {"Frame"}


def test_an_input_handle_is_bound_again_to_the_object_given_on_resume(tmp_path, calls, paused):
    store = tmp_path / "store.sqlite"
    run_id = paused("ask(1)\nuse(df)", calls, store, df=Frame("before"))
    given = Frame("after")
    result = resume_run(
        run_id, approve=True, store=store, tools=calls.tools(), inputs={"df": given, "x": 1}
    )
    assert result.value == "after"
    assert calls.seen == [given]  # the very object given now
    assert calls.made == {"ask": 1, "use": 1}


def test_a_missing_input_is_named_and_the_paused_run_stays_paused(tmp_path, calls, paused):
    store = tmp_path / "store.sqlite"
    run_id = paused("ask(1)\nuse(df)", calls, store, df=Frame("before"))
    with pytest.raises(StoreError) as raised:
        resume_run(run_id, approve=True, store=store, tools=calls.tools())
    assert str(raised.value) == (
        f"run {run_id} needs notebook variable `df` (a {FRAME} handle) to continue: define it "
        "and run again (from Python: inputs={'df': ...})"
    )
    assert calls.made == {}  # refused before the gated call
    assert Store(store).run(run_id).status == "paused"  # to be approved again
    given = {"df": Frame("now")}
    result = resume_run(run_id, approve=True, store=store, tools=calls.tools(), inputs=given)
    assert result.value == "now"
    assert calls.made == {"ask": 1, "use": 1}


def test_a_failed_run_is_not_taken_up_again_without_its_input(tmp_path, calls, paused):
    """Resuming a run that failed after its restore checks its inputs first too: nothing is
    made again, and the run is left as it was, for want of one."""
    store = tmp_path / "store.sqlite"
    run_id = paused("ask(1)\nuse(df)\n1 / 0", calls, store, df=Frame("before"))
    given = {"df": Frame("now")}
    with pytest.raises(OrchestrationError, match="ZeroDivisionError"):
        resume_run(run_id, approve=True, store=store, tools=calls.tools(), inputs=given)
    with pytest.raises(StoreError, match="needs notebook variable `df`"):
        resume_run(run_id, store=store, tools=calls.tools())
    assert calls.made == {"ask": 1, "use": 1}
    assert Store(store).run(run_id).status == "error"


def test_an_input_of_another_type_is_refused_naming_both_types(tmp_path, calls, paused):
    store = tmp_path / "store.sqlite"
    run_id = paused("ask(1)\nuse(df)", calls, store, df=Frame("before"))
    with pytest.raises(StoreError) as raised:
        resume_run(run_id, approve=True, store=store, tools=calls.tools(), inputs={"df": [1]})
    assert str(raised.value) == (
        f"run {run_id} needs `df` to be a {FRAME}, as when the run began, but it is a "
        f"builtins.list now: give it a {FRAME} and run again"
    )
    assert calls.made == {}
    assert Store(store).run(run_id).status == "paused"


def test_a_handle_inside_a_container_input_is_bound_from_the_same_place(tmp_path, calls, paused):
    store = tmp_path / "store.sqlite"
    code = "ask(1)\nuse(frames['b'][1])"
    run_id = paused(code, calls, store, frames={"a": 1, "b": [2, Frame("before")]})
    with pytest.raises(StoreError, match=r"needs `frames\['b'\]\[1\]` to be a .* but it is "):
        resume_run(
            run_id, approve=True, store=store, tools=calls.tools(), inputs={"frames": {"b": []}}
        )
    given = Frame("after")
    frames = {"frames": {"b": [0, given]}}
    result = resume_run(run_id, approve=True, store=store, tools=calls.tools(), inputs=frames)
    assert result.value == "after" and calls.seen == [given]


def test_a_handle_a_tool_returned_is_named_by_its_call_and_not_made_again(tmp_path, calls, paused):
    store = tmp_path / "store.sqlite"
    run_id = paused("m = make()\nask(1)\nuse(m)", calls, store)
    with pytest.raises(StoreError) as raised:
        resume_run(run_id, approve=True, store=store, tools=calls.tools())
    assert str(raised.value) == (
        f"run {run_id} needs the object ({FRAME}) that call #0 (make()) returned, which did "
        f"not survive the restart and is not made again: fork_run({run_id!r}, 0, value=...) "
        "continues from that call with an object you give, or run the code again with "
        "resume=False"
    )
    assert raised.value.parameter == "resume"  # the magic says "without --resume"
    assert calls.made == {"make": 1, "ask": 1}
    # what the error suggests works: the fork is handed the object as that call's result
    given = Frame("forked")
    forked = fork_run(run_id, 0, value=given, store=store, tools=calls.tools(), approver=bool)
    assert forked.value == "forked" and calls.seen == [given]
    assert calls.made == {"make": 1, "ask": 2, "use": 1}


def test_a_class_named_only_in_a_string_does_not_pass_a_lost_handle_on(tmp_path, calls, paused):
    """Only classes the code defines come back as its own stand-ins: the word ``class`` at a
    line's start inside a string defines nothing, so the lost ``Frame`` is still refused."""
    store = tmp_path / "store.sqlite"
    run_id = paused('note = """\nclass Frame:\n"""\nm = make()\nask(1)\nuse(m)', calls, store)
    with pytest.raises(StoreError, match=r"needs the object .* that call #0 \(make\(\)\)"):
        resume_run(run_id, approve=True, store=store, tools=calls.tools())
    assert calls.made == {"make": 1, "ask": 1}


def test_a_run_without_handles_stores_no_names(tmp_path, calls, paused):
    """Plain data crosses as data: nothing to name, and the inputs' record is written once."""
    store = tmp_path / "store.sqlite"
    run_id = paused("ask(1)\nuse(x)", calls, store, x=[1, "a"])
    stored = Store(store).run(run_id)
    assert not any("handles" in record for record in stored.calls.values())
    assert stored.calls[-1] == {"inputs": {"x": [1, "a"]}}


KERNEL_TOOLS = """
%load_ext jupyter_sandbox
import asyncio, time
from pathlib import Path
from jupyter_sandbox import tool

COUNTER = Path({counter!r})
DELAY = {delay}  # seconds `slow` and `step` take: long in the kernel that is killed, 0 after

def count(line):
    with COUNTER.open("a") as f:
        print(line, file=f)

class Frame:
    def __init__(self, tag):
        self.tag = tag

@tool
async def slow(frame: object) -> str:
    count(f"slow {{frame.tag}} started")
    await asyncio.sleep(DELAY)
    return frame.tag

@tool
def tick(n: int) -> int:
    count("tick")
    time.sleep(1.2)  # past the checkpoint interval: the next call writes one
    return n

@tool
def step(n: int) -> int:
    count("step")
    time.sleep(DELAY)
    return n
"""

HANDLE_CELL = """
import asyncio

async def later():
    tick(1)
    return step(2)

a, b = await asyncio.gather(slow(df), later())
f"{a} {b}"
"""


def kernel(store: Path, delay: float) -> Kernel:
    k = Kernel(store)
    k.ok(KERNEL_TOOLS.format(counter=str(store.parent / "counter"), delay=delay))
    return k


def test_a_killed_kernel_resumes_with_the_handle_bound_to_the_new_kernels_variable(tmp_path):
    """``slow(df)`` is in flight at the checkpoint (before ``step(2)``) when the kernel is
    killed; in a new kernel
    ``--resume`` first names the variable it lacks, then, once it is defined, makes ``slow``
    again with the new kernel's object (the in-flight rule) and nothing before it again."""
    path = tmp_path / "store.sqlite"
    store = Store(path)
    first = kernel(path, delay=3600)
    try:
        first.ok("df = Frame('first')")
        first.start("%%orchestrate --quiet --in df" + HANDLE_CELL)
        run = wait_for(
            "the checkpoint at step(2) with slow(df) in flight, step(2) running",
            lambda: (
                (r := the_run(store)) is not None
                and r.checkpoint is not None
                and r.checkpoint.pending
                and counted(path)["step"] == 1
                and r
            ),
        )
        workers = descendants(first.km.provisioner.pid)  # type: ignore[union-attr]
    finally:
        first.kill()
    wait_for("the killed kernel's Monty workers to end", lambda: not alive(workers))
    assert counted(path) == {"slow first started": 1, "tick": 1, "step": 1}

    second = kernel(path, delay=0)
    try:
        missing = second.run("%%orchestrate --resume --in df" + HANDLE_CELL)
        assert missing.status == "error"
        assert "df" in missing.text and "define it" in missing.text
        second.ok("df = Frame('second')")
        resumed = second.ok("%%orchestrate --quiet --resume --in df" + HANDLE_CELL)
    finally:
        second.close()
    assert resumed.value == "'second 2'"
    assert counted(path) == {
        "slow first started": 1,
        "tick": 1,  # completed before the checkpoint: not again
        "step": 2,  # in flight at the kill: made again
        "slow second started": 1,  # in flight too: made again, with the new kernel's `df`
    }
    assert store.run(run.run_id).status == "ok"


def test_the_uuid_names_survive_a_resume_that_checkpoints_again(
    tmp_path, calls, paused, durable_process
):
    """A resumed run that writes a new checkpoint and is restored again still binds its
    input's handle: the names are in the records, not in the checkpoint that is replaced."""
    store = tmp_path / "store.sqlite"
    code = "ask(1)\nask(2)\nuse(df)"
    run_id = paused(code, calls, store, df=Frame("before"))
    middle = {"df": Frame("middle")}
    again = resume_run(run_id, approve=True, store=store, tools=calls.tools(), inputs=middle)
    assert again.status == "paused"  # at ask(2): a new checkpoint
    durable_process.forget()
    given = Frame("after")
    result = resume_run(
        run_id, approve=True, store=store, tools=calls.tools(), inputs={"df": given}
    )
    assert result.value == "after" and calls.seen == [given]


def test_a_handle_the_code_returns_after_a_restore_is_the_object_given(tmp_path, calls, paused):
    store = tmp_path / "store.sqlite"
    run_id = paused("ask(1)\n[df, 2]", calls, store, df=Frame("before"))
    given = Frame("after")
    result = resume_run(
        run_id, approve=True, store=store, tools=calls.tools(), inputs={"df": given}
    )
    assert result.value[0] is given and result.value[1] == 2


GATED_TOOLS = """
@tool(approve=True)
def ask(n: int) -> int:
    count(f"ask {n}")
    return n

@tool
def use(frame: object, n: int) -> str:
    count(f"use {frame.tag}")
    return f"{frame.tag} {n}"
"""


def test_a_paused_run_approved_in_a_new_kernel_binds_its_notebook_variable(tmp_path):
    """``%orchestrate_approve`` hands the run the notebook's variables it needs: the object
    ``df`` again, while ``n`` (plain data, kept in the store) stays the run's own."""
    path = tmp_path / "store.sqlite"
    first = kernel(path, delay=0)
    try:
        first.ok(GATED_TOOLS)
        first.ok("df, n = Frame('first'), 1")
        ran = first.ok("%%orchestrate --quiet --in df,n\nask(n)\nuse(df, n)")
        (run,) = Store(path).runs()
        assert run.status == "paused", ran.text
    finally:
        first.kill()
    second = kernel(path, delay=0)
    try:
        second.ok(GATED_TOOLS)
        missing = second.run(f"%orchestrate_approve {run.run_id}")
        assert f"run {run.run_id} needs notebook variable `df`" in missing.text
        assert Store(path).run(run.run_id).status == "paused"
        second.ok("df, n = Frame('second'), 99")
        approved = second.ok(f"%orchestrate_approve {run.run_id}")
    finally:
        second.close()
    assert approved.value == "'second 1'"
    assert counted(path) == {"ask 1": 1, "use second": 1}
