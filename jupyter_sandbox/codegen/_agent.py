"""The loop: plan, code, packages, image, the model's tests in the sandbox, a diagnosis, again.

Each iteration asks the model once (a reply it cannot use gets one retry message), infers the
packages from the code's imports (checked against the image spec's grammar, `_packages`),
builds the image (the sandbox's content-addressed build: an unchanged package list builds
nothing) and runs the model's pytest tests against the code in a sandbox (`_tests`). A
failure is diagnosed (logic, test or environment) and sent back with pytest's output, until
the tests pass or ``max_iterations`` are used: then the result says ``success=False``. Errors
that are nobody's code (no Docker engine, Ctrl-C, the model's own client failing) propagate.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import json
import os
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast

from .._shared._errors import (
    ContainerError,
    DockerUnavailable,
    ImageBuildError,
    InvalidPackageError,
    SandboxConfigError,
    SandboxTimeout,
)
from .._shared._events import EventCallback, IterationFinished, IterationStarted, ignore
from ..codemode import LLM, CodeModeAgent, Message
from ..records import RunRecord
from ..sandbox import File, Resources, create
from . import _packages, _prompt, _samples, _tests
from ._reply import Reply, parse
from ._store import Journal, key_of
from ._types import CodeGenEvalResult, CodePlan, CodeSolution, ErrorDiagnosis, Iteration

if TYPE_CHECKING:
    from pydantic_ai.models import Model

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
TEST_PACKAGES = ("pytest",)
SKIPPED_TESTS = "def test_the_program_runs_on_the_samples(run):\n    run()\n"
"""The tests of ``skip_tests=True``: the program runs once on the samples, no check."""
BUILD_LOG_LINES = 30


class _Syncified(Generic[P, R]):
    """``agent.generate(...)`` and ``await agent.generate.aio(...)``, as the plugin's
    ``syncify`` methods are called (the work runs on a thread: the sandbox is synchronous)."""

    def __init__(self, fn: Callable[P, R]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def aio(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        return asyncio.to_thread(self.fn, *args, **kwargs)


class _syncify(Generic[S, P, R]):
    """A method that is both: called, it runs; its ``.aio`` is awaitable."""

    def __init__(self, fn: Callable[Concatenate[S, P], R]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: S, owner: type[Any] | None = None) -> _Syncified[P, R]:
        fn = self.fn

        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            return fn(obj, *args, **kwargs)

        bound.__doc__ = fn.__doc__
        return _Syncified(bound)


class AutoCoderAgent:
    """Describe a task, pass samples and constraints, get back code whose tests passed in a
    sandbox (`flyteplugins-codegen`'s ``AutoCoderAgent``, with its keywords).

    ``model`` is what `CodeModeAgent` takes: a function from messages to text, a pydantic-ai
    model name (``"openai:gpt-4o"``) or ``Model``. ``store`` (a folder) keeps each
    generation's journal, for ``generate(..., resume=True)`` and the cache (``cache="auto"``
    gives the result of the same prompt, samples, model and options again without asking the
    model; ``"override"`` asks again and keeps the new one; ``"disable"`` neither reads nor
    keeps); without a store nothing is kept. ``network`` is the sandboxes' (default none; an
    allow-list as `create` takes it). ``secrets`` name environment variables the sandboxes
    get; their values are masked in what the model is sent.
    """

    def __init__(
        self,
        model: LLM | str | Model,
        *,
        name: str = "auto-coder",
        system_prompt: str | None = None,
        base_packages: Sequence[str] | None = None,
        resources: Resources | Mapping[str, Any] | None = None,
        max_iterations: int = 10,
        max_sample_rows: int = 100,
        skip_tests: bool = False,
        sandbox_retries: int = 0,
        timeout: float | None = None,
        env_vars: Mapping[str, str] | None = None,
        secrets: Sequence[str] | None = None,
        cache: str = "auto",
        network: str | Sequence[str] = "none",
        base_image: str | None = None,
        store: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_iterations < 1:
            raise SandboxConfigError(
                f"max_iterations must be at least 1, got {max_iterations}",
                parameter="max_iterations",
            )
        if max_sample_rows < 1:
            raise SandboxConfigError(
                f"max_sample_rows must be at least 1, got {max_sample_rows}",
                parameter="max_sample_rows",
            )
        if cache not in ("auto", "override", "disable"):
            raise SandboxConfigError(
                f"cache must be 'auto', 'override' or 'disable', got {cache!r}", parameter="cache"
            )
        self.llm: LLM = CodeModeAgent(model, tools=[], store="").llm
        """The model as a function from messages to text (as code mode wraps it)."""
        self.name = name
        self.system_prompt = system_prompt or _prompt.SYSTEM_PROMPT
        packages, notes = _packages.checked(base_packages or ())
        if notes:
            raise SandboxConfigError(f"base_packages: {notes[0]}", parameter="base_packages")
        self.base_packages = packages
        self.max_iterations = max_iterations
        self.max_sample_rows = max_sample_rows
        self.skip_tests = skip_tests
        self.cache = cache
        self.store = None if store is None or str(store) == "" else Path(store)
        self.sandbox_options: dict[str, Any] = {
            "resources": resources,
            "retries": sandbox_retries,
            "timeout": timeout,
            "env_vars": dict(env_vars or {}),
            "secrets": list(secrets or ()),
            "network": network if isinstance(network, str) else list(network),
            "base_image": base_image,
        }
        create("codegen-check", code="pass", **self.sandbox_options)  # refused here, not later

    @_syncify
    def generate(
        self,
        prompt: str,
        *,
        schema: str | None = None,
        constraints: Sequence[str] | None = None,
        samples: Mapping[str, Any] | None = None,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        on_event: EventCallback | None = None,
        resume: bool = False,
    ) -> CodeGenEvalResult:
        """Generate code for ``prompt`` and test it in sandboxes until its tests pass (also
        ``await agent.generate.aio(...)``). ``samples`` (DataFrames, `File`s) are what the
        model sees, cut to ``max_sample_rows``; they become `File` inputs of the code.
        ``inputs``/``outputs`` declare the other variables, as `create` takes them.
        ``resume=True`` takes up this generation's journal where it stopped."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise SandboxConfigError("prompt: describe the task in plain words", parameter="prompt")
        samples = dict(samples or {})
        for name, value in samples.items():
            if name in _tests.RESERVED:
                raise SandboxConfigError(f"sample name {name!r} is reserved", parameter="samples")
            try:
                _samples.check_sample(name, value)
            except TypeError as exc:
                raise SandboxConfigError(str(exc), parameter="samples") from None
        declared_inputs: dict[str, Any] = {name: File for name in samples}
        declared_inputs.update(inputs or {})
        declared_outputs = dict(outputs or {})
        create("codegen-check", code="pass", inputs=declared_inputs, outputs=declared_outputs)
        secret_values = [os.environ.get(n, "") for n in self.sandbox_options["secrets"]]
        context, digests = _samples.summarise(samples, self.max_sample_rows, secret_values)
        task = _prompt.task_message(
            prompt,
            schema=schema,
            constraints=constraints,
            data_context=context or None,
            inputs=declared_inputs,
            outputs=declared_outputs,
        )
        key = key_of(
            {
                "task": task,
                "samples": digests,
                "model": _model_id(self.llm),
                "system": self.system_prompt,
                "options": {
                    "base_packages": self.base_packages,
                    "max_iterations": self.max_iterations,
                    "skip_tests": self.skip_tests,
                    "sandbox": self.sandbox_options,
                },
            }
        )
        journal = Journal(
            self.store if self.cache != "disable" else None,
            key,
            resume=resume,
            cached=self.cache == "auto",
        )
        cached = journal.done
        run = _Generation(self, journal, on_event or ignore, samples, task)
        result = run.loop()
        journal.finish(result.success)
        result.cached = cached
        result.prompt = prompt
        result.declared_inputs = declared_inputs
        result.declared_outputs = declared_outputs
        result.data_context = context or None
        result.original_samples = samples or None
        return result


class _Generation:
    """One `AutoCoderAgent.generate` call's state: the conversation, the code so far."""

    def __init__(
        self,
        agent: AutoCoderAgent,
        journal: Journal,
        emit: EventCallback,
        samples: dict[str, Any],
        task: str,
    ) -> None:
        self.agent = agent
        self.journal = journal
        self.emit = emit
        self.samples = samples
        self.messages: list[Message] = [
            {"role": "system", "content": agent.system_prompt},
            {"role": "user", "content": task},
        ]
        self.iterations: list[Iteration] = []
        self.code: str | None = None
        self.tests: str | None = SKIPPED_TESTS if agent.skip_tests else None
        self.plan: CodePlan | None = None
        self.extra_packages: list[str] = []
        self.system_packages: list[str] = []
        self.unavailable: set[str] = set()
        self.run_record: RunRecord | None = None
        """The last test run's sandbox record, for the view (not journaled)."""
        self.tokens = [0, 0]
        """Input and output tokens of every reply, replayed ones included (what the
        generation cost), where the model reports them."""

    def loop(self) -> CodeGenEvalResult:
        for number in range(1, self.agent.max_iterations + 1):
            self.run_record = None
            iteration = self.iterate(number)
            self.iterations.append(iteration)
            self.emit(
                IterationFinished(
                    number,
                    iteration.success,
                    iteration.to_record(),
                    None if iteration.diagnosis is None else iteration.diagnosis.error_type,
                    self.run_record,
                )
            )
            if iteration.success:
                break
        last = self.iterations[-1]
        error = None
        if not last.success:
            assert last.diagnosis is not None  # a failed iteration is diagnosed
            error = (
                f"no passing tests after {len(self.iterations)} iteration(s); last: "
                f"{last.diagnosis.error_type} error: {last.diagnosis.summary}"
            )
        return CodeGenEvalResult(
            solution=CodeSolution(last.code, system_packages=list(last.system_packages)),
            success=last.success,
            output=last.output,
            exit_code=last.exit_code,
            plan=self.plan,
            tests=last.tests,
            error=error,
            attempts=len(self.iterations),
            total_input_tokens=self.tokens[0],
            total_output_tokens=self.tokens[1],
            conversation_history=[dict(m) for m in self.messages],
            detected_packages=[p for p in last.packages if p not in TEST_PACKAGES],
            detected_system_packages=list(last.system_packages),
            image=last.image,
            iterations=self.iterations,
            options={
                **self.agent.sandbox_options,
                "packages": list(last.packages),
                "system_packages": list(last.system_packages),
            },
        )

    def ask(self) -> tuple[str, float, bool]:
        """The model's next reply: from the journal while it holds one, else the model's."""
        entry = self.journal.next("reply")
        if entry is not None:
            self.count_tokens(entry.get("tokens"))
            return entry["text"], float(entry.get("seconds", 0.0)), True
        start = time.perf_counter()
        text = self.agent.llm([dict(m) for m in self.messages])
        seconds = time.perf_counter() - start
        if not isinstance(text, str):
            text = f"<the model returned {type(text).__name__}, not text>"
        tokens = getattr(self.agent.llm, "last_usage", None)
        self.count_tokens(tokens)
        self.journal.add({"kind": "reply", "text": text, "seconds": seconds, "tokens": tokens})
        return text, seconds, False

    def count_tokens(self, tokens: object) -> None:
        """Add a reply's ``(input, output)`` tokens; anything else (a function model's None, a
        journal's odd value) adds nothing."""
        if (
            isinstance(tokens, (list, tuple))
            and len(tokens) == 2
            and all(type(n) is int and n >= 0 for n in tokens)
        ):
            self.tokens[0] += tokens[0]
            self.tokens[1] += tokens[1]

    def usable(self, reply: Reply) -> str | None:
        """Why ``reply`` cannot be used, or None."""
        if reply.code is None and self.code is None:
            return "it held no ```python block with the program (first line `# solution.py`)"
        if reply.tests is None and self.tests is None:
            return "it held no ```python block with the tests (first line `# test_solution.py`)"
        if reply.code is None and reply.tests is None and not reply.packages:
            return "it changed nothing: no program, no tests, no packages"
        return None

    def iterate(self, number: int) -> Iteration:
        text, seconds, replayed = self.ask()
        reply = parse(text)
        notes: list[str] = []
        why = self.usable(reply)
        if why is not None:
            notes.append(f"reply not usable ({why}): asked once more")
            self.messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": _prompt.RETRY.format(why=why)},
            ]
            text, more, again = self.ask()
            seconds, replayed = seconds + more, replayed and again
            reply = parse(text)
            why = self.usable(reply)
        self.messages.append({"role": "assistant", "content": text})
        if self.iterations and reply.diagnosis is not None and self.iterations[-1].diagnosis:
            earlier = self.iterations[-1]
            assert earlier.diagnosis is not None
            earlier.notes.append(
                f"the model's reading: {reply.diagnosis} error: {reply.diagnosis_text}"
            )
        if why is not None:
            return self.unusable(number, why, notes, seconds, replayed)
        previous = self.code or ""
        if reply.code is not None:
            self.code = reply.code
        if reply.tests is not None and not self.agent.skip_tests:
            self.tests = reply.tests
        if self.plan is None and (reply.plan or reply.approach):
            self.plan = CodePlan(reply.plan or "", reply.approach or "")
        assert self.code is not None
        assert self.tests is not None
        extra, refused = _packages.checked(reply.packages)
        system, refused_system = _packages.checked(reply.system_packages, system=True)
        notes += refused + refused_system
        self.extra_packages = list(dict.fromkeys(self.extra_packages + extra))
        self.system_packages = list(dict.fromkeys(self.system_packages + system))
        inferred = _packages.distributions(
            _packages.imported(self.code) + _packages.imported(self.tests)
        )
        inferred, refused = _packages.checked(inferred)
        notes += refused
        packages = [
            p
            for p in dict.fromkeys(
                [*self.agent.base_packages, *TEST_PACKAGES, *inferred, *self.extra_packages]
            )
            if p not in self.unavailable or p in extra
        ]
        iteration = Iteration(
            number,
            self.code,
            self.tests,
            packages=packages,
            system_packages=list(self.system_packages),
            model_seconds=seconds,
            notes=notes,
            replayed=replayed,
        )
        self.emit(
            IterationStarted(
                number,
                self.agent.max_iterations,
                self.code,
                self.tests,
                plan=None if self.plan is None or number > 1 else self.plan.description,
                diff=_diff(previous, self.code),
                packages=tuple(packages),
                system_packages=tuple(self.system_packages),
                replayed=replayed,
            )
        )
        self.test(iteration)
        if iteration.diagnosis is not None:
            self.messages.append({"role": "user", "content": iteration.feedback or ""})
        return iteration

    def unusable(
        self, number: int, why: str, notes: list[str], seconds: float, replayed: bool
    ) -> Iteration:
        """An iteration whose replies held nothing to run: it fails without a sandbox."""
        iteration = Iteration(
            number,
            self.code or "",
            self.tests or "",
            model_seconds=seconds,
            notes=notes,
            replayed=replayed,
        )
        iteration.diagnosis = ErrorDiagnosis("reply", f"the reply could not be used: {why}")
        iteration.feedback = _prompt.RETRY.format(why=why)
        self.messages.append({"role": "user", "content": iteration.feedback})
        return iteration

    def test(self, iteration: Iteration) -> None:
        """Build the image and run the tests (or answer both from the journal)."""
        entry = self.journal.next("tests")
        if entry is None:
            entry = self.run_tests(iteration)
            self.journal.add(entry)
        else:
            iteration.replayed = True
        iteration.image = entry.get("image") if isinstance(entry.get("image"), str) else None
        iteration.build_seconds = _number(entry.get("build_seconds"))
        iteration.test_seconds = _number(entry.get("test_seconds"))
        iteration.output = entry["output"][-_tests.OUTPUT_CHARS :]
        build_error = entry.get("build_error")
        if isinstance(build_error, str):
            named = entry.get("failed_packages")
            failed = [p for p in iteration.packages if isinstance(named, list) and p in named]
            required = {*self.agent.base_packages, *TEST_PACKAGES}
            self.unavailable.update(p for p in failed if p not in required)
            iteration.exit_code = -1
            iteration.diagnosis = ErrorDiagnosis(
                "environment",
                f"the image build failed: {build_error.strip().splitlines()[-1][:300]}"
                if build_error.strip()
                else "the image build failed",
                needs_language_packages=failed,
            )
            iteration.feedback = _prompt.build_message(failed, build_error)
            return
        run_error = entry.get("run_error")
        report = _tests.read_report(entry.get("report"))
        if report is None:
            iteration.exit_code = -1
            message = run_error if isinstance(run_error, str) else "the test run left no report"
            iteration.diagnosis = ErrorDiagnosis("logic", message[:300])
            iteration.feedback = _prompt.failure_message("logic", message, iteration.output)
            return
        iteration.exit_code, iteration.outcomes = report
        if iteration.exit_code == 0 and iteration.outcomes:
            return
        diagnosis = _tests.diagnose(iteration.exit_code, iteration.outcomes, iteration.output)
        iteration.diagnosis = diagnosis
        iteration.feedback = _prompt.failure_message(
            diagnosis.error_type, diagnosis.summary, iteration.output
        )

    def run_tests(self, iteration: Iteration) -> dict[str, Any]:
        options = dict(self.agent.sandbox_options)
        inputs: dict[str, Any] = {
            _tests.SOLUTION_INPUT: iteration.code,
            _tests.TESTS_INPUT: iteration.tests,
            _tests.SAMPLES_INPUT: json.dumps(list(self.samples)),
        }
        inputs.update({n: _samples.as_input(n, v) for n, v in self.samples.items()})
        sandbox = create(
            f"{self.agent.name}-tests",
            code=_tests.RUNNER,
            inputs={n: (File if n in self.samples else str) for n in inputs},
            outputs={"report": str},
            packages=iteration.packages,
            system_packages=iteration.system_packages,
            **options,
        )
        try:
            run = sandbox.execute(inputs, on_event=self.emit)
        except DockerUnavailable:
            raise
        except ImageBuildError as exc:
            failed = [exc.package] if isinstance(exc, InvalidPackageError) else []
            return {
                "kind": "tests",
                "output": "",
                "build_error": "\n".join([str(exc), *_build_lines(exc.log)]),
                "failed_packages": failed,
            }
        except (SandboxTimeout, ContainerError) as exc:
            record = getattr(exc, "record", None) or {}
            self.run_record = cast("RunRecord", record) if record else None
            output = str(record.get("stdout", "")) + str(record.get("stderr", ""))
            return {"kind": "tests", "output": output, "run_error": f"{type(exc).__name__}: {exc}"}
        self.run_record = run.to_record()
        build = run.build
        build_seconds = 0.0 if build is None else build.seconds  # a cached image: its lookup
        return {
            "kind": "tests",
            "image": run.image,
            "output": run.stdout + run.stderr,
            "report": run.value,
            "build_seconds": build_seconds,
            "test_seconds": max(0.0, run.duration - build_seconds),
        }


def _build_lines(log: str) -> list[str]:
    """The failing step's own words: the installer's lines, not our build plumbing."""
    noise = ("Step ", " --->", "Removing intermediate", "The command ", "Using Python")
    lines = [line for line in log.strip().splitlines() if not line.startswith(noise)]
    return lines[-BUILD_LOG_LINES:]


def _diff(before: str, after: str) -> str:
    if not before:
        return ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        "solution.py (before)",
        "solution.py",
    )
    return "".join(lines)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _model_id(llm: object) -> str:
    """What names the model in the cache key: a pydantic-ai model's provider and name, a
    function's or a callable object's qualified name."""
    if hasattr(llm, "model"):
        return repr(llm)
    kind = llm if callable(llm) and hasattr(llm, "__qualname__") else type(llm)
    return f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', repr(kind))}"
