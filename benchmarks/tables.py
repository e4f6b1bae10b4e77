"""Markdown tables from the JSON results of the benchmark scripts.

    JUPYTER_SANDBOX_BENCH_JSON=benchmarks/results/orchestrate.json \\
        .venv/bin/python benchmarks/bench_orchestrate.py --hot
    .venv/bin/python benchmarks/tables.py benchmarks/results/*.json     # Markdown on stdout

Each result becomes a section: the command, the machine and its load, then each table with
every row's time and its ratio to the table's first row (the baseline, measured in the same
run). The docs' performance page includes what this prints for ``benchmarks/results/``
(``docs/conf.py`` runs it at each build), so its tables are the scripts' own output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load_line(machine: dict[str, list[float] | str | int]) -> str:
    start, end = machine["load_start"], machine["load_end"]
    assert isinstance(start, list)
    assert isinstance(end, list)
    return (
        f"{machine['cores']} cores, load average (1/5/15 min) {'/'.join(map(str, start))} at the "
        f"start, {'/'.join(map(str, end))} at the end; {machine['date']}; "
        f"Python {machine['python']} on {machine['platform']}"
    )


def markdown(path: Path) -> str:
    result = json.loads(path.read_text())
    command = " ".join(["benchmarks/" + result["script"], *result["argv"]])
    out = [f"### `{command}`", "", f"Measured on {load_line(result['machine'])}.", ""]
    for table in result["tables"]:
        unit = table["unit"] + (" each" if table["per"] > 1 else "")
        out += [f"**{table['title']}**", "", f"| row | {unit} | vs baseline |", "|---|---:|---:|"]
        for row in table["rows"]:
            out.append(f"| {row['label']} | {row['value']:.2f} | {row['ratio']:.2f}x |")
        out.append("")
    return "\n".join(out)


def main(paths: list[str]) -> str:
    return "\n".join(markdown(Path(p)) for p in sorted(paths))


if __name__ == "__main__":
    print(main(sys.argv[1:]))
