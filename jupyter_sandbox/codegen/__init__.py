"""Code generation: describe a task, pass samples, get back a program whose tests passed in a
sandbox (`flyteplugins-codegen`'s names: `AutoCoderAgent`, `CodeGenEvalResult`).

No IPython here (``%%codegen`` is a thin shell over `AutoCoderAgent`). The model is what
`CodeModeAgent` takes: a function from messages to text, a pydantic-ai model name or Model::

    agent = AutoCoderAgent(llm, base_packages=["pandas"], store="codegen-store")
    result = agent.generate("Total of the amount column", samples={"sales": df},
                            outputs={"total": float})
    result.success, result.solution.code, result.tests, result.run(sales=full_df)
"""

from __future__ import annotations

from .._shared._public import publish_top_level
from ._agent import AutoCoderAgent
from ._prompt import SYSTEM_PROMPT, format_reply
from ._types import (
    CodeGenEvalResult,
    CodePlan,
    CodeSolution,
    ErrorDiagnosis,
    Iteration,
    TestOutcome,
)

__all__ = [
    "SYSTEM_PROMPT",
    "AutoCoderAgent",
    "CodeGenEvalResult",
    "CodePlan",
    "CodeSolution",
    "ErrorDiagnosis",
    "Iteration",
    "TestOutcome",
    "format_reply",
]

publish_top_level(__name__, globals())
