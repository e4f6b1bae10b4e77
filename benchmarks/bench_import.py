"""What importing the package costs: ``import jupyter_sandbox`` and ``%load_ext`` in a fresh
interpreter, against a bare interpreter and against importing IPython (what every kernel has).

    .venv/bin/python benchmarks/bench_import.py [--rounds 9]

Each row starts a new ``python`` process (so nothing is cached in ``sys.modules``), rows taken
in turn each round; medians. The second table counts the modules each row leaves loaded, ours
and in all, and says whether the heavy optional parts (Docker's SDK, Dask, ipywidgets, the
durable store's sqlite3, the MCP SDK, pydantic-ai) came in.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _timing import measure, print_table

ROWS = {
    "bare python (baseline)": "pass",
    "import IPython": "import IPython",
    "IPython shell, no extension": (
        "from IPython.testing.globalipapp import start_ipython\nstart_ipython()"
    ),  # what %load_ext adds to: the shell's own history already loads sqlite3
    "import jupyter_sandbox": "import jupyter_sandbox",
    "%load_ext jupyter_sandbox": (
        "from IPython.testing.globalipapp import start_ipython\n"
        "start_ipython().run_line_magic('load_ext', 'jupyter_sandbox')"
    ),
}
HEAVY = ("docker", "distributed", "ipywidgets", "sqlite3", "pydantic_monty", "mcp", "pydantic_ai")

REPORT = """
import json, sys
ours = [m for m in sys.modules if m.split('.')[0] == 'jupyter_sandbox']
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({'ours': len(ours), 'all': len(sys.modules), 'heavy': heavy}))
"""


def run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def loaded(code: str) -> dict[str, object]:
    """Modules left loaded after ``code`` in a fresh interpreter."""
    script = f"{code}\nHEAVY = {HEAVY!r}\n{REPORT}"
    done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    report: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rows = [(label, lambda code=code: run(code)) for label, code in ROWS.items()]
    print_table(
        f"Start-up of a fresh interpreter (median of {args.rounds})",
        measure(rows, args.rounds),
        unit="ms",
    )
    print(f"\n{'modules loaded':44} {'ours':>6} {'all':>6}  heavy parts in")
    for label, code in ROWS.items():
        report = loaded(code)
        heavy = ", ".join(report["heavy"]) or "-"  # type: ignore[arg-type]
        print(f"{label:44} {report['ours']:>6} {report['all']:>6}  {heavy}")


if __name__ == "__main__":
    main()
