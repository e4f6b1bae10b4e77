"""Approval gates hold wherever a gated tool is called from: a run nested in a tool (an
``@orchestrator``'s body, a plain or async tool calling ``orchestrate``) asks the approver of
the run that called the tool, is refused when that run would pause for a person instead, and
fails saying the call needs approval when no one answers. Real Monty workers, a real store in
tmp_path; the tools record what they did, so a call that slipped through shows."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import pytest

from jupyter_sandbox import (
    OrchestrationError,
    ToolError,
    fork_run,
    orchestrate,
    orchestrate_async,
    orchestrator,
    resume_run,
)
from jupyter_sandbox.events import ToolCall
from jupyter_sandbox.orchestration import Tool

made: list[str] = []
"""What the gated tools did, in order (emptied by `fresh`)."""


def _wipe(path: str) -> str:
    made.append(f"wipe {path}")
    return "wiped " + path


def _scrub(path: str) -> str:
    made.append(f"scrub {path}")
    return "scrubbed " + path


wipe = Tool(_wipe, "wipe", approve=True)  # not registered: no test leaves a tool behind
scrub = Tool(_scrub, "scrub", approve=True)


@orchestrator(tools=[wipe])
def cleanup(path: str) -> str:
    return wipe(path)


@orchestrator(tools=[cleanup])
def deep_cleanup(path: str) -> str:
    return cleanup(path)


def nested_wipe(path: str) -> str:
    """A plain tool whose own code runs a sandboxed run that calls the gated tool."""
    return orchestrate("wipe(path)", tools=[wipe], inputs={"path": path}).value


async def nested_wipe_async(path: str) -> str:
    """The same from an async tool, its nested run on the tool loop."""
    return (await orchestrate_async("wipe(path)", tools=[wipe], inputs={"path": path})).value


def caught(call: str, before: str = "") -> str:
    """Code whose value is ``call``'s, or the text of the exception it raised."""
    return f"{before}try:\n    said = {call}\nexcept Exception as e:\n    said = str(e)\nsaid"


@pytest.fixture(autouse=True)
def fresh() -> None:
    made.clear()


class Asked:
    """An approver that answers ``verdict`` and keeps the calls it was asked about."""

    def __init__(self, verdict: bool) -> None:
        self.verdict = verdict
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __call__(self, call: ToolCall) -> bool:
        self.calls.append((call.tool, call.args))
        return self.verdict


@pytest.mark.parametrize(
    "through",
    [cleanup, deep_cleanup, Tool(nested_wipe, "through")],
    ids=["orchestrator", "orchestrator-in-orchestrator", "tool-calling-orchestrate"],
)
def test_a_nested_run_asks_the_approver_of_the_run_that_called_its_tool(through: Tool) -> None:
    code = f"{through.name}('/home')"
    refusing = Asked(False)
    with pytest.raises(ToolError, match=r"wipe\(\) was rejected"):
        orchestrate(code, tools=[through], approver=refusing)
    assert made == []
    assert refusing.calls == [("wipe", ("/home",))]
    approving = Asked(True)
    assert orchestrate(code, tools=[through], approver=approving).value == "wiped /home"
    assert made == ["wipe /home"]
    assert approving.calls == [("wipe", ("/home",))]


def test_orchestrate_async_hands_its_approver_to_an_async_tools_nested_run() -> None:
    async def main(verdict: bool) -> Any:
        return await orchestrate_async(
            "await through('/srv')",
            tools=[Tool(nested_wipe_async, "through")],
            approver=lambda call: verdict,
        )

    with pytest.raises(ToolError, match=r"wipe\(\) was rejected"):
        asyncio.run(main(False))
    assert made == []
    assert asyncio.run(main(True)).value == "wiped /srv"
    assert made == ["wipe /srv"]


def test_a_nested_gated_call_no_one_can_answer_fails_saying_it_needs_approval() -> None:
    for code, tools in (
        ("cleanup('/a')", [cleanup]),
        ("through('/a')", [Tool(nested_wipe, "through")]),
    ):
        with pytest.raises(ToolError, match=r"wipe\(\) needs approval") as failed:
            orchestrate(code, tools=tools)
        assert "\n" not in str(failed.value)
    with pytest.raises(OrchestrationError, match=r"wipe\(\) needs approval.*approver=") as direct:
        cleanup("/a")  # called from the host, outside any run
    assert "\n" not in str(direct.value)
    assert made == []


def test_a_durable_run_refuses_a_nested_gated_call_it_cannot_pause_for(tmp_path: Any) -> None:
    store = tmp_path / "store.sqlite"
    code = caught("cleanup('/a')")
    result = orchestrate(code, tools=[cleanup], store=store)
    assert result.status == "ok"
    assert "wipe() needs approval" in result.value and "cannot pause" in result.value
    assert made == []
    asked = Asked(True)
    assert orchestrate(code, tools=[cleanup], store=store, approver=asked).value == "wiped /a"
    assert asked.calls == [("wipe", ("/a",))]


def test_resume_and_fork_hand_their_approver_to_nested_runs(tmp_path: Any) -> None:
    store = tmp_path / "store.sqlite"
    code = "first = scrub('/tmp')\n(first, cleanup('/home'))"
    paused = orchestrate(code, tools=[scrub, cleanup], store=store)
    assert paused.status == "paused" and [c.tool for c in paused.pending] == ["scrub"]
    with pytest.raises(ToolError, match=r"wipe\(\) was rejected") as refused:
        resume_run(
            paused.run_id, approve=True, store=store, tools=[scrub, cleanup], approver=Asked(False)
        )
    assert made == ["scrub /tmp"]
    assert refused.value.result is not None
    first = next(c.call_id for c in refused.value.result.trace if c.tool == "scrub")
    for verdict in (False, True):
        made.clear()
        try:
            forked: Any = fork_run(
                paused.run_id,
                first,
                "given",
                store=store,
                tools=[scrub, cleanup],
                approver=Asked(verdict),
            ).value
        except ToolError as exc:
            forked = str(exc)
        if verdict:
            assert forked == ("given", "wiped /home")
            assert made == ["wipe /home"]
        else:
            assert "wipe() was rejected" in forked
            assert made == []


def test_concurrent_runs_each_ask_their_own_approver() -> None:
    """Two runs in flight at once (each waits at a barrier both reach), one approving and
    one refusing: each nested call is asked of its own run's approver only."""
    barrier = threading.Barrier(2, timeout=60)

    def meet() -> None:
        barrier.wait()

    approvers = {"/yes": Asked(True), "/no": Asked(False)}
    outcomes: dict[str, Any] = {}

    def run(path: str) -> None:
        code = caught(f"cleanup({path!r})", before="meet()\n")
        outcomes[path] = orchestrate(
            code, tools=[Tool(meet), cleanup], approver=approvers[path]
        ).value

    threads = [threading.Thread(target=run, args=(path,)) for path in approvers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes["/yes"] == "wiped /yes"
    assert "wipe() was rejected" in outcomes["/no"]
    assert approvers["/yes"].calls == [("wipe", ("/yes",))]
    assert approvers["/no"].calls == [("wipe", ("/no",))]
    assert made == ["wipe /yes"]


def test_an_inner_approver_answers_its_own_tools_but_never_past_the_outer_run() -> None:
    """A tool author's own approver approves the tools that only its nested run has; a tool
    the calling run gates itself is asked there too, and the outer refusal holds."""

    def tidy(path: str) -> str:
        inner = orchestrate(
            "try:\n    w = wipe(p)\nexcept PermissionError as e:\n    w = 'refused: ' + str(e)\n"
            "(scrub(p), w)",
            tools=[scrub, wipe],
            inputs={"p": path},
            approver=lambda call: True,
        )
        return repr(inner.value)

    outer = Asked(False)
    value = orchestrate("tidy('/var')", tools=[Tool(tidy), wipe], approver=outer).value
    assert value == repr(("scrubbed /var", "refused: wipe() was rejected"))
    assert made == ["scrub /var"]
    assert outer.calls == [("wipe", ("/var",))]  # never asked about scrub: not its tool


def _wrapped(path: str) -> str:
    return _wipe(path)


@pytest.mark.parametrize(
    "copy",
    [
        Tool(_wipe, "w"),
        Tool(functools.partial(_wipe), "w"),
        Tool(_wipe, "w", approve=lambda path: False),
        Tool(functools.wraps(_wipe)(_wrapped), "w"),
    ],
    ids=["tool-again", "partial", "approve-false-predicate", "wraps"],
)
def test_an_ungated_copy_of_a_gated_function_in_a_nested_run_asks_the_outer_approver(
    copy: Tool,
) -> None:
    """A tool's code that runs the gated function under another name and no gate of its own
    (a copy, a partial, a predicate that never gates, a ``functools.wraps`` wrapper) is asked
    of the calling run's approver, as the gated tool itself is."""

    def through(path: str) -> str:
        return orchestrate("w(path)", tools=[copy], inputs={"path": path}).value

    tools = [Tool(through), wipe]
    refusing = Asked(False)
    with pytest.raises(ToolError, match=r"w\(\) was rejected"):
        orchestrate("through('/etc')", tools=tools, approver=refusing)
    assert made == []
    assert refusing.calls == [("w", ("/etc",))]
    assert orchestrate("through('/etc')", tools=tools, approver=Asked(True)).value == "wiped /etc"
    assert made == ["wipe /etc"]


def _direct(path: str) -> str:
    """A tool whose own Python calls the gated tool (the `Tool` object, not a nested run)."""
    return wipe(path)


def _apply(f: Any, path: str) -> Any:
    """A tool that calls whatever the code hands it."""
    return f(path)


@pytest.mark.parametrize(
    ("code", "tools", "inputs"),
    [
        ("direct('/opt')", [Tool(_direct, "direct")], {}),
        ("apply(f, '/opt')", [Tool(_apply, "apply")], {"f": wipe}),
    ],
    ids=["by-name-in-a-tool", "handle-passed-to-a-tool"],
)
def test_a_gated_tool_called_as_python_inside_a_tool_asks_the_calling_run(
    code: str, tools: list[Tool], inputs: dict[str, Any]
) -> None:
    refusing = Asked(False)
    with pytest.raises(ToolError, match=r"wipe\(\) was rejected"):
        orchestrate(code, tools=tools, inputs=inputs, approver=refusing)
    assert made == []
    assert refusing.calls == [("wipe", ("/opt",))]
    with pytest.raises(ToolError, match=r"wipe\(\) needs approval.*no approver") as unanswered:
        orchestrate(code, tools=tools, inputs=inputs)
    assert "\n" not in str(unanswered.value)
    assert made == []
    assert orchestrate(code, tools=tools, inputs=inputs, approver=Asked(True)).value == "wiped /opt"
    assert made == ["wipe /opt"]
    assert wipe("/notebook") == "wiped /notebook"  # the notebook's own call, outside any run
