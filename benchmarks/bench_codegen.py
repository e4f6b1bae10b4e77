"""What code generation costs besides the model: one iteration split into the model's reply, the
image and the test run, and the time to a passing result against the plugin's design.

    .venv/bin/python benchmarks/bench_codegen.py [--rounds N]

A scripted model (replies prepared, no network), so what is timed is ours. First table: one
iteration whose tests pass (the image already built: a package list seen before builds
nothing), and its parts as the iteration records them (`Iteration.model_seconds`,
``build_seconds``, ``test_seconds``: a container with pytest, the solution and its tests).
Second table: a model that makes a bug and fixes it (two iterations), against
`flyteplugins-codegen`'s design, in the same run: each iteration a fresh sandbox with no warm
spare (here: each iteration's test run gets a tmpfs size no run had, so no spare can serve it).
Rows take turns each round (medians). A script, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

from _timing import measure_prepared, print_table

from jupyter_sandbox.codegen import AutoCoderAgent, CodeGenEvalResult, format_reply
from jupyter_sandbox.codemode import ScriptedLLM
from jupyter_sandbox.events import Event, IterationStarted
from jupyter_sandbox.sandbox import File
from jupyter_sandbox.sandbox._pool import quiesce, settle

PROGRAM = (
    "lines = open(sales).read().splitlines()[{first}:]\n"
    'total = float(sum(int(x.split(",")[1]) for x in lines))\n'
)
TESTS = 'def test_the_samples_total(run):\n    assert run()["total"] == 6.0\n'
BUG = format_reply(plan="add up the amounts", code=PROGRAM.format(first=2), tests=TESTS)
FIX = format_reply(diagnosis="logic: the header is one line, not two", code=PROGRAM.format(first=1))
GOOD = format_reply(plan="add up the amounts", code=PROGRAM.format(first=1), tests=TESTS)
SIZES = itertools.count(300)


def sample() -> File:
    folder = Path(tempfile.mkdtemp(prefix="bench-codegen-"))
    (folder / "sales.csv").write_text("item,amount\na,1\nb,2\nc,3\n")
    return File(folder / "sales.csv")


SALES = sample()


def generate(replies: list[str], *, fresh: bool = False) -> CodeGenEvalResult:
    agent = AutoCoderAgent(ScriptedLLM(replies), max_iterations=3)

    def fresh_sandbox(event: Event) -> None:
        """The plugin's design: a new sandbox each iteration, no spare waiting for it."""
        if fresh and isinstance(event, IterationStarted):
            agent.sandbox_options["resources"] = {"disk": f"{next(SIZES)}m"}

    result = agent.generate(
        "Total of the amount column",
        samples={"sales": SALES},
        outputs={"total": float},
        on_event=fresh_sandbox,
    )
    assert result.success, result.error
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    generate([GOOD])  # the image with pytest, built once
    parts: list[tuple[float, float, float]] = []

    def one_iteration() -> None:
        (iteration,) = generate([GOOD]).iterations
        parts.append((iteration.model_seconds, iteration.build_seconds, iteration.test_seconds))

    whole = measure_prepared([("one iteration, tests pass", quiesce, one_iteration)], args.rounds)
    parts = parts[1:]  # round 0 warmed up
    print_table(
        "one iteration (scripted model, image built before; parts as the iteration records them)",
        [
            *whole,
            ("  the model's reply", statistics.median(p[0] for p in parts)),
            ("  the image (built before: no build step)", statistics.median(p[1] for p in parts)),
            ("  the test run (pytest in a sandbox)", statistics.median(p[2] for p in parts)),
        ],
        unit="ms",
    )
    rows = measure_prepared(
        [
            (
                "plugin's design: fresh sandbox per iteration",
                quiesce,
                lambda: generate([BUG, FIX], fresh=True),
            ),
            ("ours: warm spares", quiesce, lambda: generate([BUG, FIX])),
        ],
        args.rounds,
    )
    settle()
    print_table("time to a passing result: a bug, then its fix (2 iterations)", rows, unit="s")


if __name__ == "__main__":
    main()
