"""The code-mode agent loop with a scripted model and real Monty (nothing of Monty is mocked)."""

from __future__ import annotations

import json

import pytest
from _kernels import kernel

from jupyter_sandbox import (
    CodeModeAgent,
    CodeModeError,
    OrchestrationError,
    SandboxConfigError,
    ToolError,
    TypeCheckError,
    system_prompt,
)
from jupyter_sandbox.codemode import ScriptedLLM, extract_code
from jupyter_sandbox.codemode import _capabilities as caps_module
from jupyter_sandbox.codemode._probes import PROBES
from jupyter_sandbox.events import AttemptFinished, AttemptStarted, CallStarted

PRICES = {"apple": 0.5, "pear": 0.75}


def price(item: str) -> float:
    """Unit price of ``item`` in EUR; KeyError for items we do not sell."""
    return PRICES[item]


async def stock(item: str) -> int:
    """How many of ``item`` are in the warehouse."""
    return len(item)


class Basket:
    """Not plain data: crosses the sandbox as an opaque handle."""


def fence(code: str) -> str:
    return f"Here is the program:\n```python\n{code}\n```\nIt sums the prices."


GOOD = fence("total = 0\nfor item in basket:\n    total += price(item)\ntotal")


def agent(replies, **options):
    model = ScriptedLLM(replies)
    options.setdefault("inputs", {"basket": ["apple", "pear"]})
    return model, CodeModeAgent(model, [price, stock], **options)


# -- the loop ---------------------------------------------------------------------------------


def test_type_error_goes_back_to_the_model_and_the_fix_runs():
    model, loop = agent([fence("price(1)"), GOOD])
    result = loop.run("What does the basket cost?")

    assert result.value == 1.25
    assert [a.ok for a in result.attempts] == [False, True]
    first, second = result.attempts
    assert isinstance(first.error, TypeCheckError)
    assert first.result is not None
    assert first.result.trace == []  # rejected before any tool ran
    # The second request is the first conversation plus the reply and the diagnostics.
    assert model.requests[1][:2] == model.requests[0]
    assert model.requests[1][2] == {"role": "assistant", "content": fence("price(1)")}
    feedback = model.requests[1][3]
    assert feedback["role"] == "user"
    assert "Argument to function `price` is incorrect" in feedback["content"]
    assert feedback["content"] == first.feedback
    assert second.messages == model.requests[1]
    assert [c.tool for c in result.trace] == ["price", "price"]
    assert result.code == second.code


def test_tool_exception_traceback_and_prints_go_back_but_not_the_host_traceback():
    wrong = fence("print('looking up kiwi')\nprice('kiwi')")
    model, loop = agent([wrong, GOOD])
    result = loop.run("What does a kiwi cost?")

    failed = result.attempts[0]
    assert isinstance(failed.error, ToolError)
    assert failed.result is not None
    assert failed.result.trace[0].host_traceback  # kept in the trace for people...
    sent = model.requests[1][-1]["content"]
    assert 'File "<cell>", line 2' in sent  # ...while the model gets the sandbox traceback
    assert "ToolError: tool 'price' raised KeyError: 'kiwi'" in sent
    assert "looking up kiwi" in sent
    assert __file__ not in sent
    assert result.value == 1.25


def test_exhausted_attempts_raise_codemode_error_with_every_attempt():
    replies = [fence("price('kiwi')"), "I would rather not.", fence("price(2)")]
    model, loop = agent(replies)
    with pytest.raises(CodeModeError, match=r"after 3 attempt\(s\); last: TypeCheckError") as info:
        loop.run("What does a kiwi cost?")

    error = info.value
    assert isinstance(error, OrchestrationError)
    assert len(model.requests) == 3
    assert [type(a.error) for a in error.attempts] == [
        ToolError,
        OrchestrationError,
        TypeCheckError,
    ]
    assert error.attempts[1].code is None
    assert error.attempts[1].result is None
    assert "no Python code" in model.requests[2][-1]["content"]
    assert error.result is error.attempts[-1].result
    json.dumps([a.to_record() for a in error.attempts])  # records are JSON-safe


def test_success_on_the_first_attempt_asks_once():
    model, loop = agent([GOOD], max_attempts=5)
    result = loop.run("Total?")
    assert len(model.requests) == 1
    assert len(result.attempts) == 1
    assert model.requests[0][0] == {"role": "system", "content": loop.system_prompt}
    assert model.requests[0][1] == {"role": "user", "content": "Total?"}
    record = json.loads(json.dumps(result.to_record()))
    assert record["attempts"][0]["trace"]["value"] == "1.25"


def test_async_tools_run_concurrently_from_model_code():
    code = "import asyncio\ncounts = await asyncio.gather(*[stock(i) for i in basket])\ncounts"
    _, loop = agent([fence(code)])
    assert loop.run("Stock of each item?").value == [5, 4]


def test_events_frame_each_attempt():
    events = []
    _, loop = agent([fence("price(1)"), GOOD])
    loop.run("Total?", on_event=events.append)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "AttemptStarted",
        "AttemptFinished",
        "AttemptStarted",
        *["CallStarted", "CallFinished"] * 2,
        "AttemptFinished",
    ]
    started = [e for e in events if isinstance(e, AttemptStarted)]
    assert [(e.number, e.max_attempts, e.code) for e in started] == [
        (1, 3, "price(1)"),
        (2, 3, extract_code(GOOD)),
    ]
    finished = [e for e in events if isinstance(e, AttemptFinished)]
    assert finished[0].error.startswith("TypeCheckError")
    assert finished[1].error is None
    assert finished[1].record["status"] == "ok"
    assert all(isinstance(e, CallStarted) for e in events[3:7:2])


def test_model_errors_are_not_retried():
    def broken(messages):
        raise ConnectionError("API unreachable")

    with pytest.raises(ConnectionError):
        CodeModeAgent(broken, [price]).run("anything")


@pytest.mark.parametrize(
    ("llm", "options", "message"),
    [
        (42, {}, "llm must be a callable"),
        ("not a model", {}, "llm='not a model': Unknown model"),
        (ScriptedLLM([]), {"max_attempts": 0}, "max_attempts must be at least 1"),
        (ScriptedLLM([]), {"limits": {"timeout": 5}}, "limits takes Limits(...)"),
    ],
)
def test_bad_configuration_is_rejected_up_front(llm, options, message):
    with pytest.raises(SandboxConfigError, match=message):
        CodeModeAgent(llm, [price], **options)


def test_a_model_returning_non_text_is_a_config_error():
    with pytest.raises(SandboxConfigError, match="llm must return str, got dict"):
        CodeModeAgent(lambda messages: {"content": "1"}, [price]).run("x")


# -- code extraction --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ("```python\nx = 1\nx\n```", "x = 1\nx"),
        ("Sure!\n```py\nadd(1, 2)\n```\nThat adds.", "add(1, 2)"),
        ("```\nuntagged()\n```", "untagged()"),
        ("```python\ndraft()\n```\nBetter:\n```python\nfinal()\n```", "final()"),
        ('Input:\n```json\n{"a": 1}\n```\n```python\nrun()\n```', "run()"),
        ("~~~python\ntilde()\n~~~", "tilde()"),
        ("```python\ncut_off(\n  1)", "cut_off(\n  1)"),
        ("add(1, 2)\n", "add(1, 2)"),
        ('````python\ns = """\n```\n"""\n````', 's = """\n```\n"""'),
        ("I cannot do that, sorry.", None),
        ('```json\n{"a": 1}\n```', None),
        ("```python\n\n```", None),
        ("", None),
    ],
)
def test_extract_code(reply, code):
    assert extract_code(reply) == code


# -- the system prompt ------------------------------------------------------------------------


def test_system_prompt_has_stubs_docstrings_and_inputs():
    prompt = system_prompt([price, stock], {"basket": ["apple"], "handle": Basket()})
    assert "def price(item: str) -> float:\n" in prompt
    assert '"""Unit price of ``item`` in EUR; KeyError for items we do not sell."""' in prompt
    assert "async def stock(item: str) -> int:" in prompt
    assert "basket: list[Any]  # ['apple']" in prompt
    assert "handle: Basket  # opaque handle" in prompt
    assert "class Basket: ..." in prompt


def test_system_prompt_states_the_measured_capabilities():
    prompt = system_prompt([price])
    measured = caps_module.capabilities()
    assert f"measured on pydantic-monty {measured.monty_version}" in prompt
    works = prompt[prompt.index("- Works:") : prompt.index("- Modules you can import")]
    for verdict in measured.select("language", True):
        assert f"  - {verdict.probe.label}\n" in works
    for verdict in measured.select("language", False):
        assert f"  - {verdict.probe.label} ({verdict.detail})" in prompt
    for verdict in measured.verdicts:
        assert verdict.probe.label in prompt


def test_system_prompt_without_tools_says_so():
    assert "There are no tools" in system_prompt([])


# -- the capability table ---------------------------------------------------------------------


def test_checked_in_capability_table_matches_the_installed_monty():
    """Re-measures every probe in real Monty; on a Monty upgrade, regenerate the table."""
    table = caps_module.load_table()
    assert table is not None, "capabilities.json is missing or was taken with other probes"
    measured = caps_module.measure()
    assert measured.to_json() == table.to_json(), (
        "Monty's capabilities drifted from capabilities.json: run "
        "python -m jupyter_sandbox.codemode._capabilities --write"
    )


def test_probes_find_what_the_sandbox_stops_and_what_it_allows():
    table = caps_module.load_table()
    assert table is not None
    assert table.select("sandbox", True) == []  # no escape works
    assert {"match", "classes", "try", "async"} <= {v.probe.key for v in table.verdicts if v.works}
    assert len({p.key for p in PROBES}) == len(PROBES)


def test_capabilities_measure_when_the_table_is_for_another_monty(monkeypatch):
    measured = caps_module.Capabilities("9.9.9", ())
    caps_module.capabilities.cache_clear()
    monkeypatch.setattr(caps_module, "installed_version", lambda: "9.9.9")
    monkeypatch.setattr(caps_module, "measure", lambda: measured)
    try:
        assert caps_module.capabilities() is measured
    finally:
        caps_module.capabilities.cache_clear()


# -- %%codemode -------------------------------------------------------------------------------

SETUP = """
from jupyter_sandbox import tool
from jupyter_sandbox.codemode import ScriptedLLM

@tool
def price(item: str) -> float:
    return {"apple": 0.5, "pear": 0.75}[item]

basket = ["apple", "pear"]
"""


@pytest.fixture
def nb(shell):
    assert shell.run_cell(SETUP).success
    shell.rl_next_input = None
    return shell


def scripted(nb, *replies):
    nb.user_ns["model"] = ScriptedLLM(list(replies))
    return nb.user_ns["model"]


def codemode(nb, line, task="What does the basket cost?"):
    return nb.run_cell(f"%%codemode {line}\n{task}")


def test_magic_shows_each_attempt_and_stores_the_result(nb, capsys):
    model = scripted(nb, fence("price(1)"), GOOD)
    result = codemode(nb, "--llm model --in basket --out total")
    assert result.success
    assert result.result == nb.user_ns["total"] == 1.25
    out = capsys.readouterr().out
    assert "Attempt 1 of 3:\nprice(1)" in out
    assert "Attempt 1 of 3 failed (TypeCheckError); the error goes back to the model." in out
    assert "Attempt 2 of 3:\ntotal = 0" in out
    assert "price('pear') -> 0.75" in out  # the trace of the run
    assert model.requests[1][-1]["role"] == "user"
    assert nb.user_ns["model"].requests[0][1]["content"] == "What does the basket cost?"


def test_insert_puts_the_final_code_in_a_new_orchestrate_cell(nb):
    scripted(nb, GOOD)
    assert codemode(nb, "--llm model --in basket --out total --insert").success
    code = extract_code(GOOD)
    header, mark, body = nb.rl_next_input.split("\n", 2)  # the mark: see test_cell_details
    assert (header, body) == ("%%orchestrate --in basket --out total", code)
    assert mark.startswith("# inserted by %%codemode, cell ")
    assert nb.run_cell(nb.rl_next_input).result == 1.25  # and it runs as is


def test_insert_after_exhaustion_offers_the_last_try_to_fix_by_hand(nb, capsys):
    scripted(nb, fence("price('kiwi')"))
    result = codemode(nb, "--llm model --max-attempts 1 --insert")
    assert isinstance(result.error_in_exec, CodeModeError)
    header, _, body = nb.rl_next_input.split("\n", 2)
    assert (header, body) == ("%%orchestrate", "price('kiwi')")
    err = capsys.readouterr()
    assert "CodeModeError: no working code after 1 attempt(s)" in err.out + err.err


def test_llm_from_config(nb):
    scripted(nb, fence("price('apple')"))
    nb.run_line_magic("config", "CodeModeMagics.llm = 'model'")
    try:
        assert codemode(nb, "").result == 0.5
    finally:
        nb.run_line_magic("config", "CodeModeMagics.llm = ''")


def test_quiet_shows_only_prints(nb, capsys):
    scripted(nb, fence("print('hi from the model')\nprice('pear')"))
    assert codemode(nb, "--llm model --quiet").result == 0.75
    out = capsys.readouterr().out
    assert "hi from the model" in out
    assert "Attempt" not in out
    assert "price('pear')" not in out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "no model: pass --llm NAME"),
        ("--llm missing", "--llm missing: no variable 'missing'"),
        ("--llm basket", "--llm must be a callable"),
        ("--llm model --in nowhere", "--in nowhere: no variable 'nowhere'"),
        ("--llm model --tools nope", "--tools: nope not registered"),
        ("--llm model --max-attempts 0", "--max-attempts must be at least 1"),
        ("--llm model --out 1x", "--out 1x: not a valid Python variable name"),
        ("--llm model --bogus", "unknown option --bogus: %%codemode --help lists its options"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(nb, capsys, line, message):
    scripted(nb, GOOD)
    result = codemode(nb, line)
    assert not result.success
    err = capsys.readouterr().err
    assert err.startswith("UsageError: ")
    assert message in err
    assert err.strip().count("\n") == 0
    assert nb.user_ns["model"].requests == []  # the model was never asked


def test_empty_task_is_a_usage_error(nb, capsys):
    scripted(nb, GOOD)
    assert not nb.run_cell("%%codemode --llm model\n   \n").success
    assert "UsageError" in capsys.readouterr().err


def test_a_cell_out_of_attempts_says_the_error_once(tmp_path):
    """In a real kernel: the view shows the attempt's error; the cell's error output is one
    line naming it and %%codemode's own option, not the error again in the API's words."""
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok("from jupyter_sandbox.codemode import ScriptedLLM\nm = ScriptedLLM(['add(\"a\", 1)'])")
        ran = k.run("%%codemode --llm m --max-attempts 1\nAdd a to one.")
    assert ran.status == "error"
    assert ran.text.count("Argument to function `add` is incorrect") == 1, ran.text
    (error,) = [m["content"] for m in ran.outputs if m["msg_type"] == "error"]
    assert error["traceback"] == [
        "CodeModeError: no working code after 1 attempt(s) (the last attempt's TypeCheckError"
        " is above); --max-attempts N tries more"
    ]
