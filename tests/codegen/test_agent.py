"""Code generation against the real Docker engine: scripted models (and pydantic-ai's
`FunctionModel`) that fix their bug, import a package that does not exist, write a wrong test,
never get it right, reply with garbage or a hostile package name; what the model sees of the
samples; the journal behind ``resume=True`` and the cache."""

from __future__ import annotations

import asyncio
import json

import pandas as pd
import pytest
from _codegen_samples import BUGGY, FIXED, TESTS, TOTAL
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from jupyter_sandbox import SandboxConfigError, orchestrate, tool
from jupyter_sandbox.codegen import AutoCoderAgent, format_reply
from jupyter_sandbox.codegen._packages import checked, distributions, imported
from jupyter_sandbox.codegen._reply import parse
from jupyter_sandbox.codemode import ScriptedLLM
from jupyter_sandbox.events import IterationFinished, IterationStarted, RunStarted
from jupyter_sandbox.sandbox import File


@pytest.fixture
def sales(tmp_path) -> File:
    path = tmp_path / "sales.csv"
    path.write_text("item,amount\na,1\nb,2\nc,3\n")
    return File(path)


def generate(llm, sales, *, resume=False, **options):
    events = []
    agent = AutoCoderAgent(llm, max_iterations=options.pop("max_iterations", 3), **options)
    result = agent.generate(
        "Total of the amount column",
        samples={"sales": sales},
        outputs={"total": float},
        on_event=events.append,
        resume=resume,
    )
    return result, events


# -- without Docker: the reply, the packages ----------------------------------------------


def test_a_reply_is_read_into_its_plan_code_tests_and_packages() -> None:
    reply = parse(
        format_reply(plan="p", code="import numpy", tests="def test_x(): pass", packages=["scipy"])
    )
    assert (reply.plan, reply.code, reply.tests) == ("p", "import numpy\n", "def test_x(): pass\n")
    assert reply.packages == ["scipy"]
    assert parse("Diagnosis: test: the expected value was wrong").diagnosis == "test"
    assert parse("no blocks here at all").empty


def test_imports_map_to_distributions_and_skip_the_standard_library() -> None:
    code = "import os, csv\nimport sklearn.linear_model\nfrom PIL import Image\nimport solution\n"
    assert distributions(imported(code)) == ["scikit-learn", "pillow"]
    assert imported("def broken(:") == []


@pytest.mark.parametrize(
    "hostile",
    [
        "--index-url http://evil.example/simple",
        "https://evil.example/x.whl",
        "../../etc/passwd",
        "-e .",
        "pkg; rm -rf /",
        "git+https://evil.example/repo",
    ],
)
def test_a_hostile_package_name_is_refused_by_the_image_grammar(hostile: str) -> None:
    accepted, notes = checked([hostile, "six"])
    assert accepted == ["six"]
    assert notes and "refused package" in notes[0]
    accepted, notes = checked([hostile], system=True)
    assert accepted == []
    assert notes


def test_bad_options_are_refused_before_any_model_call() -> None:
    with pytest.raises(SandboxConfigError, match="max_iterations"):
        AutoCoderAgent(ScriptedLLM([]), max_iterations=0)
    with pytest.raises(SandboxConfigError, match="base_packages"):
        AutoCoderAgent(ScriptedLLM([]), base_packages=["--index-url=http://x"])
    with pytest.raises(SandboxConfigError, match="samples take pandas DataFrames"):
        AutoCoderAgent(ScriptedLLM([])).generate("t", samples={"x": 3})
    with pytest.raises(SandboxConfigError, match="network"):
        AutoCoderAgent(ScriptedLLM([]), network="internet")
    with pytest.raises(SandboxConfigError):
        AutoCoderAgent(ScriptedLLM([]), network=["http://host/path"])


def test_a_model_that_returns_no_text_fails_its_iterations_without_a_crash() -> None:
    """Not text, twice per iteration (the reply and the one retry): each iteration fails as
    a reply error, no sandbox is started, and the result says so."""
    seen = []

    def broken(messages):
        seen.append(messages)
        return None if len(seen) % 2 else 42

    result = AutoCoderAgent(broken, max_iterations=2).generate("Total", outputs={"total": float})
    assert not result.success
    assert len(seen) == 4
    assert [i.diagnosis.error_type for i in result.iterations if i.diagnosis] == ["reply"] * 2
    assert "the model returned NoneType, not text" in seen[1][-2]["content"]
    assert result.error is not None
    assert "reply error" in result.error


# -- with Docker ---------------------------------------------------------------------------

docker = pytest.mark.usefixtures("no_leaked_containers")


@pytest.mark.docker
@docker
def test_a_model_that_fixes_its_bug_passes_in_the_second_iteration(sales) -> None:
    llm = ScriptedLLM([BUGGY, FIXED])
    result, events = generate(llm, sales)
    assert result.success
    assert result.attempts == 2
    first, second = result.iterations
    assert first.diagnosis is not None
    assert first.diagnosis.error_type == "logic"
    assert [o.outcome for o in first.outcomes] == ["failed", "failed"]
    assert "assert 5.0 == 6.0" in (first.feedback or "")
    assert "assert 5.0 == 6.0" in llm.requests[1][-1]["content"]  # pytest's output went back
    assert [o.outcome for o in second.outcomes] == ["passed", "passed"]
    assert any("the model's reading: logic error" in n for n in first.notes)
    assert result.plan is not None
    assert result.plan.description == "read the CSV and add up the amount column"
    assert result.tests is not None
    assert "test_one_row" in result.tests
    started = [e for e in events if isinstance(e, IterationStarted)]
    assert [e.number for e in started] == [1, 2]
    assert "-total = float(sum(float(row" in started[1].diff
    assert "pytest" in started[0].packages
    finished = [e for e in events if isinstance(e, IterationFinished)]
    assert [(e.success, e.diagnosis) for e in finished] == [(False, "logic"), (True, None)]
    assert json.loads(json.dumps(result.to_record()))["iterations"][1]["status"] == "passed"
    big = sales.path.with_name("big.csv")
    big.write_text("item,amount\n" + "".join(f"i{n},{n}\n" for n in range(1, 101)))
    assert result.run(sales=File(big)) == 5050.0
    assert result.run() == 6.0  # the samples are the defaults
    total_of = tool(result.as_task(), name="total_of")  # a tool for orchestration code
    done = orchestrate("await total_of(sales=data)", tools=[total_of], inputs={"data": File(big)})
    assert done.value == 5050.0


def networks_reply(expected: list[str]) -> str:
    """A program that lists its network interfaces, and a test that they are ``expected``."""
    return format_reply(
        code="import os\nnetworks = sorted(os.listdir('/sys/class/net'))\n",
        tests=f"def test_the_interfaces(run):\n    assert run()['networks'] == {expected!r}\n",
    )


@pytest.mark.docker
@docker
@pytest.mark.parametrize(("network", "expected"), [("none", ["lo"]), ("bridge", ["eth0", "lo"])])
def test_the_generated_code_and_its_tests_run_on_the_network_asked_for(network, expected) -> None:
    """No network by default, as every sandbox: ``network=`` is the program's and its tests'."""
    llm = ScriptedLLM([networks_reply(expected)])
    agent = AutoCoderAgent(llm, max_iterations=1, network=network)
    result = agent.generate("List the network interfaces", outputs={"networks": list})
    assert result.success, result.error
    assert result.run() == expected  # the program run again later: the same network


@pytest.mark.docker
@docker
def test_a_package_that_does_not_exist_fails_the_build_and_is_replaced(sales) -> None:
    missing = format_reply(
        plan="use a helper package",
        code="import jsbx_no_such_package_anywhere\n" + TOTAL.format(cut=""),
        tests=TESTS.format(expected=6.0),
    )
    replaced = format_reply(
        diagnosis="environment: that package does not exist; the csv module does it",
        code=TOTAL.format(cut=""),
    )
    llm = ScriptedLLM([missing, replaced])
    result, _ = generate(llm, sales)
    assert result.success
    first = result.iterations[0]
    assert first.diagnosis is not None
    assert first.diagnosis.error_type == "environment"
    assert "jsbx-no-such-package-anywhere" in first.packages
    assert "jsbx-no-such-package-anywhere" in llm.requests[1][-1]["content"]
    assert "jsbx-no-such-package-anywhere" not in result.iterations[1].packages


@pytest.mark.docker
@docker
def test_a_wrong_test_is_diagnosed_and_only_the_tests_change(sales) -> None:
    wrong = format_reply(code=TOTAL.format(cut=""), tests=TESTS.format(expected=7.0))
    fixed_test = format_reply(
        diagnosis="test: 1 + 2 + 3 is 6, the test expected 7", tests=TESTS.format(expected=6.0)
    )
    result, _ = generate(ScriptedLLM([wrong, fixed_test]), sales)
    assert result.success
    first, second = result.iterations
    assert first.code == second.code
    assert first.tests != second.tests
    assert any("the model's reading: test error" in note for note in first.notes)


@pytest.mark.docker
@docker
def test_a_model_that_never_gets_it_right_ends_unsuccessful(sales) -> None:
    result, events = generate(ScriptedLLM([BUGGY, BUGGY]), sales, max_iterations=2)
    assert not result.success
    assert result.attempts == 2
    assert result.error is not None
    assert result.error.startswith("no passing tests after 2 iteration(s)")
    with pytest.raises(ValueError, match="failed code generation"):
        result.as_task()
    assert [e.success for e in events if isinstance(e, IterationFinished)] == [False, False]


@pytest.mark.docker
@docker
def test_garbage_gets_one_retry_message_and_never_a_crash(sales) -> None:
    llm = ScriptedLLM(["I am sorry, I cannot write code today.", BUGGY, FIXED])
    result, _ = generate(llm, sales)
    assert result.success
    retry = llm.requests[1][-1]["content"]
    assert retry.startswith("Your reply could not be used: it held no ```python block")
    assert any("asked once more" in n for n in result.iterations[0].notes)
    garbage = ScriptedLLM(["nothing", "still nothing", "{}", "[]"])
    result, _ = generate(garbage, sales, max_iterations=2)
    assert not result.success
    assert [i.diagnosis.error_type for i in result.iterations if i.diagnosis] == ["reply"] * 2


@pytest.mark.docker
@docker
def test_hostile_package_names_in_a_reply_are_refused_not_installed(sales) -> None:
    hostile = format_reply(
        code=TOTAL.format(cut=""),
        tests=TESTS.format(expected=6.0),
        packages=["--index-url=http://evil.example/simple", "https://evil.example/x.whl"],
        system_packages=["curl;rm", "../x"],
    )
    result, events = generate(ScriptedLLM([hostile]), sales)
    assert result.success
    (iteration,) = result.iterations
    assert not any("evil" in p for p in iteration.packages)
    assert iteration.system_packages == []
    assert sum("refused" in n for n in iteration.notes) == 4
    runs = [e for e in events if isinstance(e, RunStarted)]
    assert runs


@pytest.mark.docker
@docker
def test_no_value_outside_the_sample_reaches_the_model(tmp_path, monkeypatch) -> None:
    """A real DataFrame of 300 rows, each with a value found nowhere else; the model may see
    the first 5. Every message sent is captured and searched for the other 295 values, and
    a secret value inside the sample is masked."""
    monkeypatch.setenv("JSBX_CODEGEN_TOKEN", "s3cr3t-token-value")
    frame = pd.DataFrame(
        {
            "item": [f"item-{n:04d}-zq" for n in range(300)],
            "amount": [1000 + n * 7 for n in range(300)],
            "note": ["s3cr3t-token-value"] + ["plain"] * 299,
        }
    )
    seen: list[list[ModelMessage]] = []
    replies = [
        format_reply(
            code=(
                "import csv\nwith open(sales) as f:\n    rows = list(csv.DictReader(f))\n"
                "total = float(sum(float(r['amount']) for r in rows))\n"
            ),
            tests="def test_total_is_a_float(run):\n    assert isinstance(run()['total'], float)\n",
        )
    ]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(replies[len(seen) - 1])])

    agent = AutoCoderAgent(FunctionModel(answer), max_sample_rows=5, secrets=["JSBX_CODEGEN_TOKEN"])
    result = agent.generate("Total amount", samples={"sales": frame}, outputs={"total": float})
    assert result.success
    sent = "\n".join(str(part.content) for m in seen[0] for part in m.parts)  # type: ignore[union-attr]
    assert "item-0004-zq" in sent
    leaked = [f"item-{n:04d}-zq" for n in range(5, 300) if f"item-{n:04d}-zq" in sent]
    leaked += [str(1000 + n * 7) for n in range(5, 300) if str(1000 + n * 7) in sent]
    assert leaked == []
    assert "s3cr3t-token-value" not in sent
    assert "300 rows" in sent
    assert result.run() == float(frame["amount"].sum())  # the whole frame runs, not the sample


@pytest.mark.docker
@docker
def test_resume_takes_up_the_journal_without_asking_the_model_again(sales, tmp_path) -> None:
    """A model that dies in iteration 3 (as a killed kernel would): taken up again, the
    model is asked from iteration 3 on, and the earlier iterations' sandboxes do not run."""
    buggy_again = format_reply(code=TOTAL.format(cut="[2:]"))

    class Killable(ScriptedLLM):
        def __init__(self, replies, *, dies_at=None):
            super().__init__(replies)
            self.dies_at = dies_at

        def __call__(self, messages):
            if len(self.requests) + 1 == self.dies_at:
                raise KeyboardInterrupt
            return super().__call__(messages)

    with pytest.raises(KeyboardInterrupt):
        generate(Killable([BUGGY, buggy_again], dies_at=3), sales, store=tmp_path)
    later = Killable([FIXED])
    result, events = generate(later, sales, store=tmp_path, resume=True)
    assert result.success
    assert [i.replayed for i in result.iterations] == [True, True, False]
    assert len(later.requests) == 1  # iteration 3's only
    assert "rows[2:]" in later.requests[0][-2]["content"]  # the journaled reply, sent again
    assert "assert 3.0 == 6.0" in later.requests[0][-1]["content"]
    assert len([e for e in events if isinstance(e, RunStarted)]) == 1  # iteration 3's tests


@pytest.mark.docker
@docker
def test_the_same_generation_again_is_the_cached_result_without_the_model(sales, tmp_path):
    first, _ = generate(ScriptedLLM([BUGGY, FIXED]), sales, store=tmp_path)
    assert first.success
    assert not first.cached
    agent = AutoCoderAgent(ScriptedLLM([BUGGY, FIXED]), store=tmp_path, max_iterations=3)
    result = agent.generate(
        "Total of the amount column", samples={"sales": sales}, outputs={"total": float}
    )
    assert result.cached
    assert result.solution.code == first.solution.code
    assert agent.llm.requests == []  # type: ignore[attr-defined]
    other = AutoCoderAgent(ScriptedLLM([BUGGY, FIXED]), store=tmp_path, cache="override")
    fresh = other.generate(
        "Total of the amount column", samples={"sales": sales}, outputs={"total": float}
    )
    assert not fresh.cached
    assert len(other.llm.requests) == 2  # type: ignore[attr-defined]


@pytest.mark.docker
@docker
def test_the_tokens_a_model_reports_are_added_up_and_kept_with_the_cached_result(sales, tmp_path):
    """A pydantic-ai model's reported usage, summed over the replies; a function model reports
    none (0); the cached result says what the generation cost when it ran."""
    replies = iter([BUGGY, FIXED])

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart(next(replies))], usage=RequestUsage(input_tokens=120, output_tokens=30)
        )

    result, _ = generate(FunctionModel(answer), sales, store=tmp_path)
    assert result.success and result.attempts == 2
    assert (result.total_input_tokens, result.total_output_tokens) == (240, 60)
    again, _ = generate(FunctionModel(answer), sales, store=tmp_path)  # `replies` is spent
    assert again.cached and (again.total_input_tokens, again.total_output_tokens) == (240, 60)
    plain, _ = generate(ScriptedLLM([BUGGY, FIXED]), sales)
    assert (plain.total_input_tokens, plain.total_output_tokens) == (0, 0)


@pytest.mark.docker
@docker
def test_generate_is_awaitable(sales) -> None:
    agent = AutoCoderAgent(ScriptedLLM([BUGGY, FIXED]))
    result = asyncio.run(
        agent.generate.aio(
            "Total of the amount column", samples={"sales": sales}, outputs={"total": float}
        )
    )
    assert result.success
    assert result.attempts == 2
