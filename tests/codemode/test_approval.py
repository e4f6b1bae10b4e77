"""`CodeModeAgent` honours approval gates, with a scripted model, real Monty
and a real store file: an approver answers inline; without one, a gated call pauses the run
and ends the turn (no failure goes back to the model), and `resume_run` finishes it."""

from __future__ import annotations

import pytest

from jupyter_sandbox import CodeModeAgent, Store, orchestrator, resume_run
from jupyter_sandbox.codemode import ScriptedLLM
from jupyter_sandbox.errors import StoreError
from jupyter_sandbox.orchestration import Tool, default_store_path

CODE = """```python
n = count(2)
try:
    said = delete("/data/old")
except PermissionError as e:
    said = "refused: " + str(e)
(n, said)
```"""


def tools(made: list[tuple[str, object]]) -> list[Tool]:
    def count(n: int) -> int:
        made.append(("count", n))
        return n

    def delete(path: str) -> str:
        made.append(("delete", path))
        return "deleted " + path

    return [Tool(count), Tool(delete, approve=True)]  # not registered: no test leaves a tool


wiped: list[str] = []


def _wipe(path: str) -> str:
    wiped.append(path)
    return "wiped " + path


wipe = Tool(_wipe, "wipe", approve=True)


@orchestrator(tools=[wipe])
def cleanup(path: str) -> str:
    return wipe(path)


INJECTED = """```python
try:
    said = wipe("/home")
except PermissionError:
    try:
        said = cleanup("/home")
    except Exception as e:
        said = "refused: " + str(e)
said
```"""
"""A model told to wipe /home that, refused, tries the orchestrator that wipes for it."""


def test_a_refused_call_stays_refused_when_the_model_calls_it_through_an_orchestrator(tmp_path):
    asked: list[tuple[str, tuple[object, ...]]] = []

    def approver(call):
        asked.append((call.tool, call.args))
        return False

    wiped.clear()
    agent = CodeModeAgent(ScriptedLLM([INJECTED]), [wipe, cleanup], approver=approver)
    result = agent.run("wipe /home")
    assert result.value.startswith("refused: ") and "wipe() was rejected" in result.value
    assert asked == [("wipe", ("/home",))] * 2  # asked again for the nested call
    # without an approver the run is durable: the nested call cannot pause, so it is refused
    store = tmp_path / "store.sqlite"
    paused = CodeModeAgent(ScriptedLLM([INJECTED]), [wipe, cleanup], store=store).run("wipe /home")
    assert paused.result.status == "paused"  # at the direct call; answered with a refusal:
    (run,) = Store(store).runs(status="paused")
    rejected = resume_run(run.run_id, approve=False, store=store, tools=[wipe, cleanup])
    assert "needs approval" in rejected.value and "cannot pause" in rejected.value
    assert wiped == []


def test_an_approver_answers_gated_calls_inline():
    asked: list[tuple[str, tuple[object, ...]]] = []
    for verdict, value in ((True, (2, "deleted /data/old")), (False, None)):
        made: list[tuple[str, object]] = []

        def approver(call, verdict=verdict):
            asked.append((call.tool, call.args))
            return verdict

        agent = CodeModeAgent(ScriptedLLM([CODE]), tools(made), approver=approver)
        assert agent.store is None  # answered inline: nothing to keep
        result = agent.run("tidy up")
        assert result.result.status == "ok"
        if verdict:
            assert result.value == value
            assert made == [("count", 2), ("delete", "/data/old")]
        else:
            assert result.value[1].startswith("refused: ")
            assert made == [("count", 2)]
    assert asked == [("delete", ("/data/old",))] * 2


def test_without_an_approver_a_gated_call_pauses_and_ends_the_turn(tmp_path):
    made: list[tuple[str, object]] = []
    model = ScriptedLLM([CODE, "never asked"])
    store = tmp_path / "store.sqlite"
    agent = CodeModeAgent(model, tools(made), store=store)
    result = agent.run("tidy up")
    assert len(model.requests) == 1 and len(result.attempts) == 1
    paused = result.result
    assert paused.status == "paused" and paused.run_id
    assert [(c.tool, c.args) for c in paused.pending] == [("delete", ("/data/old",))]
    assert made == [("count", 2)]
    done = resume_run(paused.run_id, approve=True, store=store, tools=tools(made))
    assert done.value == (2, "deleted /data/old")
    assert made == [("count", 2), ("delete", "/data/old")]  # count(2) is not made again


def test_gated_tools_without_approver_or_store_use_the_default_store(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_path / "default.sqlite"))
    made: list[tuple[str, object]] = []
    agent = CodeModeAgent(ScriptedLLM([CODE]), tools(made))
    assert agent.store == default_store_path() == tmp_path / "default.sqlite"
    assert agent.run("tidy up").result.status == "paused"
    # no gated tool: runs stay out of any store, as before
    assert CodeModeAgent(ScriptedLLM([CODE]), tools(made)[:1]).store is None


def test_the_magic_keeps_runs_in_the_configured_store_and_an_empty_one_is_off(
    shell, tmp_path, capsys
):
    """%%codemode uses %config OrchestrateMagics.store (not the default store): a gated call
    pauses the run there; with the setting empty there is no store, so it fails instead."""
    configured = tmp_path / "configured.sqlite"
    assert shell.run_cell(
        "from jupyter_sandbox import tool\nfrom jupyter_sandbox.codemode import ScriptedLLM\n"
        "made = []\n@tool\ndef count(n: int) -> int:\n    made.append(n)\n    return n\n"
        "@tool(approve=True)\ndef delete(path: str) -> str:\n    return 'deleted ' + path\n"
    ).success
    try:
        shell.run_line_magic("config", f"OrchestrateMagics.store = {str(configured)!r}")
        shell.user_ns["model"] = ScriptedLLM([CODE])
        assert shell.run_cell("%%codemode --llm model --quiet\ntidy up").success
        (paused,) = Store(configured).runs(status="paused")
        with pytest.raises(StoreError, match="no run"):
            Store(default_store_path()).run(paused.run_id)
        shell.run_line_magic("config", "OrchestrateMagics.store = ''")
        shell.user_ns["model"] = ScriptedLLM([CODE])
        failed = shell.run_cell("%%codemode --llm model --quiet --max-attempts 1\ntidy up")
        assert not failed.success and "needs approval" in str(failed.error_in_exec)
        assert len(Store(configured).runs()) == 1  # nothing more kept
    finally:
        shell.run_line_magic("config", "OrchestrateMagics.store = None")
