"""Running the model's tests against its code, in a sandbox, and reading what happened.

The test run is itself a ``%%sandbox`` program (`RUNNER`): it writes the solution, the tests
and a conftest with the ``run`` and ``samples`` fixtures into a private folder, runs pytest in
the container's own interpreter and returns one JSON report (each test's outcome) as its
output, besides pytest's output on stdout. The report is read as untrusted data: the code under
test runs in that interpreter and could forge it, so a report that does not parse is a failed
run, and nothing in it is executed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._types import ErrorDiagnosis, ErrorType, TestOutcome

SOLUTION_INPUT = "codegen_solution"
TESTS_INPUT = "codegen_tests"
SAMPLES_INPUT = "codegen_samples"
RESERVED = frozenset({SOLUTION_INPUT, TESTS_INPUT, SAMPLES_INPUT})
MESSAGE_CHARS = 3000
OUTPUT_CHARS = 12_000
"""Characters of pytest's output the model is sent (its tail: the summary is at the end)."""

CONFTEST = """\
import json, os, runpy
import pytest

SAMPLES = json.loads(os.environ["CODEGEN_SAMPLES"])
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def samples():
    return dict(SAMPLES)


@pytest.fixture
def run():
    def run_solution(**inputs):
        variables = {**SAMPLES, **inputs}
        return runpy.run_path(
            os.path.join(HERE, "solution.py"), init_globals=variables, run_name="__main__"
        )

    return run_solution
"""

RUNNER = f"""\
import json, os, sys, tempfile

work = tempfile.mkdtemp(prefix="codegen-")
for file_name, text in (
    ("solution.py", {SOLUTION_INPUT}),
    ("test_solution.py", {TESTS_INPUT}),
    ("conftest.py", {CONFTEST!r}),
):
    with open(os.path.join(work, file_name), "w") as handle:
        handle.write(text)
os.environ["CODEGEN_SAMPLES"] = json.dumps({{n: globals()[n] for n in json.loads({SAMPLES_INPUT})}})
import pytest


class Collect:
    def __init__(self):
        self.tests = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            outcome = report.outcome if report.when == "call" else "error"
            message = report.longreprtext[-{MESSAGE_CHARS}:] if report.failed else ""
            self.tests.append(dict(name=report.nodeid.split("::")[-1], outcome=outcome,
                                   message=message))

    def pytest_collectreport(self, report):
        if report.failed:
            self.tests.append(dict(name="collecting the tests", outcome="error",
                                   message=report.longreprtext[-{MESSAGE_CHARS}:]))


collect = Collect()
os.chdir(work)
code = int(pytest.main([work, "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider",
                        "--no-header"], plugins=[collect]))
report = json.dumps(dict(exit_code=code, tests=collect.tests))
"""


def read_report(text: object) -> tuple[int, list[TestOutcome]] | None:
    """The runner's report, or None when it is not one (forged, cut, missing)."""
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
        code = int(data["exit_code"])
        tests = [
            TestOutcome(str(t["name"])[:200], str(t["outcome"])[:20], str(t["message"]))
            for t in data["tests"]
        ]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return code, tests


_ENVIRONMENT = re.compile(r"\b(ModuleNotFoundError|ImportError)\b|No module named")
_IN_SOLUTION = re.compile(r"solution\.py\"?:\d+|solution\.py:\d+")


def diagnose(exit_code: int, tests: list[TestOutcome], output: str) -> ErrorDiagnosis:
    """Whose fault a failed run is, as its output reads: an import that failed is the
    environment's, a test that could not run (a collection or fixture error, an error raised
    in the test's own lines) the tests', a failure raised in or checked against the
    solution's result the logic's. The model may read it otherwise (its ``Diagnosis:``)."""
    failed = [t for t in tests if t.outcome in ("failed", "error")]
    text = "\n".join(t.message for t in failed) or output
    kind: ErrorType
    if _ENVIRONMENT.search(text):
        kind = "environment"
    elif exit_code in (2, 4, 5) or any(t.outcome == "error" for t in failed):
        kind = "test"  # interrupted, usage error, no tests collected, errors outside a test
    elif any(_IN_SOLUTION.search(t.message) and "AssertionError" not in t.message for t in failed):
        kind = "logic"
    elif failed and all(_raised_in_test(t.message) for t in failed):
        kind = "test"
    else:
        kind = "logic"
    names = ", ".join(t.name for t in failed[:5]) or "no test passed"
    last = _last_error(text)
    return ErrorDiagnosis(kind, f"{names}: {last}" if last else names)


def _raised_in_test(message: str) -> bool:
    """An exception other than a failed assert, raised in the test's own lines."""
    last = _last_error(message)
    return bool(last) and not last.startswith("AssertionError") and "solution.py" not in message


def _last_error(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("E "):
            return line[2:].strip()[:300]
    return ""


def summary_of(outcomes: list[TestOutcome]) -> dict[str, Any]:
    return {o.outcome: sum(1 for p in outcomes if p.outcome == o.outcome) for o in outcomes}
