"""What the model is told: the format of a reply, the task with its samples, and each failure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_PROMPT = """\
You write one Python program and the pytest tests that check it. The program runs as a \
notebook cell in a disposable Linux container with Python 3.11 and no network: each input is \
a variable that already exists when it starts (a file input is the path of the file, as a \
str), and it assigns each output to a variable of that name. It must not read input from \
anywhere else.

The tests are a pytest module, test_solution.py, beside the program. Two fixtures are there:
- `run(**inputs)` runs the program once with those input variables (the samples fill the \
inputs not given) and returns its variables as a dict, e.g. `run()["total"]`;
- `samples` is a dict of each sample input's path.
Test the task's behaviour on the samples and on small cases the test writes itself (files it \
writes in pytest's `tmp_path`).

Reply in this format, nothing else:

Plan: one line: what the program does and how.
Packages: third-party packages beyond the imports, if any (pip names), or leave the line out
System packages: Debian packages the program needs, if any, or leave the line out

```python
# solution.py
the program
```

```python
# test_solution.py
the tests
```

After a failure, begin with `Diagnosis: logic|test|environment: why`, then send the blocks \
you change (a block you leave out stays as it was)."""
"""What the model is told first (``system_prompt=`` replaces it): the program is an auto-IO
``%%sandbox`` cell, the tests a pytest module with the ``run`` and ``samples`` fixtures, and the
reply's format, which `format_reply` writes."""

RETRY = """\
Your reply could not be used: {why}. Reply in the format of the instructions: a ```python \
block for the program (first line `# solution.py`) and one for the tests (first line \
`# test_solution.py`)."""


def task_message(
    prompt: str,
    *,
    schema: str | None,
    constraints: Sequence[str] | None,
    data_context: str | None,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
) -> str:
    parts = [f"Task: {prompt.strip()}"]
    if constraints:
        parts.append("Constraints:\n" + "\n".join(f"- {c}" for c in constraints))
    if schema:
        parts.append(f"Data formats:\n{schema.strip()}")
    if inputs:
        parts.append(
            "Inputs (variables): " + ", ".join(f"{n}: {_name(t)}" for n, t in inputs.items())
        )
    if outputs:
        parts.append(
            "Outputs (variables to assign): "
            + ", ".join(f"{n}: {_name(t)}" for n, t in outputs.items())
        )
    if data_context:
        parts.append(f"Samples (the model sees these only; real data comes later):\n{data_context}")
    return "\n\n".join(parts)


def _name(declared: Any) -> str:
    if declared is None:
        return "any"
    if isinstance(declared, str):
        return declared
    return getattr(declared, "__name__", str(declared))


def failure_message(kind: str, summary: str, output: str) -> str:
    return (
        f"The tests failed ({kind} error, as the output reads): {summary}\n\n"
        f"pytest's output:\n{output}\n\n"
        "Fix it: begin with your Diagnosis line, then the blocks you change."
    )


def build_message(packages: Sequence[str], log: str) -> str:
    return (
        f"The image build failed installing {', '.join(packages) or 'the packages'} "
        f"(environment error):\n{log}\n\n"
        "A package does not exist under that name: reply with `Packages:` naming the right "
        "distribution, or change the imports (then `Diagnosis: environment: why`)."
    )


def format_reply(
    *,
    code: str | None = None,
    tests: str | None = None,
    plan: str | None = None,
    diagnosis: str | None = None,
    packages: Sequence[str] = (),
    system_packages: Sequence[str] = (),
) -> str:
    """A reply in the format `SYSTEM_PROMPT` asks for: what a scripted model (a test, a
    teaching notebook, a benchmark) answers, and what a real model's reply is read as."""
    lines = []
    if diagnosis:
        lines.append(f"Diagnosis: {diagnosis}")
    if plan:
        lines.append(f"Plan: {plan}")
    if packages:
        lines.append(f"Packages: {', '.join(packages)}")
    if system_packages:
        lines.append(f"System packages: {', '.join(system_packages)}")
    for first, body in (("# solution.py", code), ("# test_solution.py", tests)):
        if body is not None:
            lines.append(f"\n```python\n{first}\n{body.strip()}\n```")
    return "\n".join(lines) + "\n"
