"""The README stays short and its links land; the benchmark tables come from the scripts' JSON.
(The docs site itself is built with warnings as errors by ``scripts/docs.sh`` in CI.)"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    assert len(README.splitlines()) <= 250
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == [
        "bash scripts/demo.sh",
        "bash scripts/test.sh",
    ]


def test_the_readme_installs_with_pip_and_loads_the_extension_before_the_debian_setup() -> None:
    """A person with JupyterLab needs pip, not a Debian machine: that comes first, with a
    cell of each magic, and says plainly that the wheel is a local path until published."""
    debian = README.index("```bash\nbash scripts/demo.sh")
    first = README[:debian]
    assert "pip install jupyter-sandbox" in first
    assert "not on PyPI yet" in first and "scripts/package.sh" in first
    assert "%load_ext jupyter_sandbox" in first
    assert "%%orchestrate" in first and "%%sandbox" in first
    assert "lock.sh" not in README and "lock.sh" in (ROOT / "CONTRIBUTING.md").read_text()


def test_every_local_link_of_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


def test_benchmark_json_becomes_a_table_with_the_machine_and_load(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import tables
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    result = {
        "script": "bench_x.py",
        "argv": ["--rounds", "3"],
        "machine": {
            "date": "2026-01-01T00:00:00+00:00",
            "cores": 2,
            "load_start": [0.5, 0.4, 0.3],
            "load_end": [0.6, 0.4, 0.3],
            "python": "3.11.7",
            "platform": "Linux",
        },
        "tables": [
            {
                "title": "per call",
                "unit": "us",
                "per": 1000,
                "rows": [
                    {"label": "baseline", "value": 50.0, "ratio": 1.0},
                    {"label": "ours", "value": 55.0, "ratio": 1.1},
                ],
            }
        ],
    }
    path = tmp_path / "x.json"
    path.write_text(json.dumps(result))
    text = tables.main([str(path)])
    assert "`benchmarks/bench_x.py --rounds 3`" in text
    assert "2 cores, load average (1/5/15 min) 0.5/0.4/0.3 at the start" in text
    assert "| ours | 55.00 | 1.10x |" in text


@pytest.mark.parametrize("magic", ["orchestrate", "sandbox", "codemode", "codegen"])
def test_every_option_of_a_cell_magic_is_a_row_of_its_docs_table(magic: str) -> None:
    """The table is made from the parser; an option without an example stops the docs build,
    so a new option cannot be missing from its table."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import _options
    finally:
        sys.path.remove(str(ROOT / "docs"))
    parser = _options.parser_of(magic)
    table = _options.table(magic, parser)
    names = [action.option_strings[-1] for action in _options.options(parser)]
    assert names
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()[2:]]
    assert rows == [f"`{name}`" for name in names]
    assert not set(_options.EXAMPLES[magic]) - set(names)  # no example of a removed option
    page = {"codemode": "orchestrate", "codegen": "sandbox"}.get(magic, magic)
    assert f"_generated/options-{magic}.md" in (ROOT / "docs/reference" / f"{page}.md").read_text()


def _doc_names() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import doc_names
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return doc_names


def test_every_name_the_docs_and_architecture_give_exists_in_the_code() -> None:
    """A rename that misses a page fails here, with the page, the line and the name."""
    assert _doc_names().stale() == []


def test_a_name_the_code_lost_is_reported_with_its_page_and_line(tmp_path: Path) -> None:
    doc_names = _doc_names()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "`Driver.run` and `_plug.plug` hold; `orchestration/_plug.py` too.\n"
        "`Driver.gone`, `_plug.vanished`, `orchestration/_gone.py`, `jupyter_sandbox.nope`\n"
        "`--max-result 5`, `os.path.join`, `x = 1` are not names of ours\n"
    )
    stale = doc_names.stale(tmp_path)
    assert stale == [
        "docs/page.md:2: `Driver.gone`",
        "docs/page.md:2: `_plug.vanished`",
        "docs/page.md:2: `orchestration/_gone.py`",
        "docs/page.md:2: `jupyter_sandbox.nope`",
    ]


@pytest.mark.parametrize(
    "page",
    sorted(p.name for p in (ROOT / "docs/how-to").glob("*.md") if p.name != "index.md"),
)
def test_a_how_to_is_numbered_steps_a_person_reads_in_a_few_minutes(page: str) -> None:
    """Numbered steps toward one goal, under ~120 lines; internals (the tests that attack a
    promise, file modes, seals) live on the safety and reference pages."""
    text = (ROOT / "docs/how-to" / page).read_text()
    assert len(text.splitlines()) <= 120
    assert re.search(r"^(## )?1\. ", text, re.MULTILINE), "no step 1"
    assert re.search(r"^(## )?2\. ", text, re.MULTILINE), "no step 2"
