"""What a code generation keeps, with `flyteplugins-codegen`'s names so code written for it
ports: the plan, the solution, each iteration whole, and the result that runs on real data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..sandbox import Sandbox

ErrorType = Literal["logic", "test", "environment", "reply"]
"""Whose fault a failure is: the solution's code, the model's tests, the image, or a reply
that held nothing to run."""


@dataclass(frozen=True)
class CodePlan:
    """The model's plan, asked for before any code (the first reply's ``Plan:`` lines)."""

    description: str
    approach: str = ""


@dataclass(frozen=True)
class CodeSolution:
    """The program: an auto-IO ``%%sandbox`` cell (inputs are variables, outputs are read from
    variables), with the packages its image installs."""

    code: str = ""
    language: str = "python"
    system_packages: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TestOutcome:
    """One pytest test as it ran in the sandbox."""

    __test__ = False  # pytest: not a test class

    name: str
    outcome: str
    """``passed``, ``failed``, ``error`` (a fixture or collection failed) or ``skipped``."""
    message: str = ""


@dataclass(frozen=True)
class ErrorDiagnosis:
    """Why an iteration failed and what went back to the model."""

    error_type: ErrorType
    summary: str
    needs_language_packages: list[str] = field(default_factory=list)
    needs_system_packages: list[str] = field(default_factory=list)


@dataclass
class Iteration:
    """One round: the code and tests the model gave, the image, each test's outcome."""

    number: int
    code: str
    tests: str
    packages: list[str] = field(default_factory=list)
    system_packages: list[str] = field(default_factory=list)
    image: str | None = None
    build_seconds: float = 0.0
    test_seconds: float = 0.0
    model_seconds: float = 0.0
    outcomes: list[TestOutcome] = field(default_factory=list)
    output: str = ""
    exit_code: int = 0
    diagnosis: ErrorDiagnosis | None = None
    feedback: str | None = None
    """The message that told the model why this iteration failed."""
    notes: list[str] = field(default_factory=list)
    """What the agent refused or repaired in the reply (a package name, a retry)."""
    replayed: bool = False

    @property
    def success(self) -> bool:
        return self.diagnosis is None

    def to_record(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "code": self.code,
            "tests": self.tests,
            "packages": list(self.packages),
            "system_packages": list(self.system_packages),
            "image": self.image,
            "build_seconds": round(self.build_seconds, 3),
            "test_seconds": round(self.test_seconds, 3),
            "model_seconds": round(self.model_seconds, 3),
            "outcomes": [
                {"name": o.name, "outcome": o.outcome, "message": o.message} for o in self.outcomes
            ],
            "output": self.output,
            "exit_code": self.exit_code,
            "status": "passed" if self.success else "failed",
            "diagnosis": None
            if self.diagnosis is None
            else {"error_type": self.diagnosis.error_type, "summary": self.diagnosis.summary},
            "feedback": self.feedback,
            "notes": list(self.notes),
            "replayed": self.replayed,
        }


@dataclass(repr=False)
class CodeGenEvalResult:
    """A code generation's outcome (``success`` False when ``max_iterations`` ran out).

    ``run(**overrides)`` runs the tested code on real data (the samples as defaults) in the
    image the tests passed in; ``as_task()`` is that program as a `Sandbox`, which is
    callable and can be a tool of an orchestration (``tool(result.as_task())``).
    """

    solution: CodeSolution
    success: bool
    output: str = ""
    exit_code: int = 0
    plan: CodePlan | None = None
    tests: str | None = None
    error: str | None = None
    attempts: int = 0
    conversation_history: list[dict[str, str]] = field(default_factory=list)
    detected_packages: list[str] = field(default_factory=list)
    detected_system_packages: list[str] = field(default_factory=list)
    image: str | None = None
    total_input_tokens: int = 0
    """Tokens the replies cost as a pydantic-ai model reported them (a function model: 0)."""
    total_output_tokens: int = 0
    declared_inputs: dict[str, Any] | None = None
    declared_outputs: dict[str, Any] | None = None
    data_context: str | None = None
    original_samples: dict[str, Any] | None = None
    """The samples as the sandbox takes them (a DataFrame as a `File` of its CSV)."""
    iterations: list[Iteration] = field(default_factory=list)
    cached: bool = False
    """True when this result came from the cache and no model was asked."""
    prompt: str = ""
    options: dict[str, Any] = field(default_factory=dict, repr=False)
    """What `as_task` creates the sandbox with (resources, timeout, secrets...)."""

    def __repr__(self) -> str:
        state = "passed" if self.success else "failed"
        cached = ", cached" if self.cached else ""
        return (
            f"<CodeGenEvalResult {state} after {self.attempts} iteration(s){cached}; "
            f"packages {self.detected_packages}>"
        )

    def as_task(self, name: str = "run_code_on_real_data", **overrides: Any) -> Sandbox:
        """The tested program as a `Sandbox` on the tested image; keywords as `create`'s."""
        from ..sandbox import create

        if not self.success:
            raise ValueError("cannot make a task of a failed code generation: its tests failed")
        options: dict[str, Any] = {**self.options, **overrides}
        return create(
            name,
            code=self.solution.code,
            inputs=dict(self.declared_inputs or {}),
            outputs=dict(self.declared_outputs or {}),
            **options,
        )

    def run(self, **overrides: Any) -> Any:
        """Run the tested code once on ``overrides`` (the samples fill what is not given):
        None, the single output, or a tuple of outputs in declaration order."""
        return self.as_task().run(**self.inputs_for(overrides))

    async def run_async(self, **overrides: Any) -> Any:
        return await self.as_task().run_async(**self.inputs_for(overrides))

    def inputs_for(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The samples with ``overrides`` on top, a DataFrame written as its CSV `File`."""
        from ._samples import as_input

        merged = {**(self.original_samples or {}), **overrides}
        return {name: as_input(name, value) for name, value in merged.items()}

    def to_record(self) -> dict[str, Any]:
        """JSON-safe: the prompt, the plan and every iteration, as the saved cell shows it."""
        return {
            "kind": "codegen",
            "prompt": self.prompt,
            "success": self.success,
            "plan": None
            if self.plan is None
            else {"description": self.plan.description, "approach": self.plan.approach},
            "code": self.solution.code,
            "tests": self.tests,
            "packages": list(self.detected_packages),
            "system_packages": list(self.detected_system_packages),
            "image": self.image,
            "error": self.error,
            "cached": self.cached,
            "iterations": [i.to_record() for i in self.iterations],
        }
