"""The auto-IO runner's start in a real container: what a plain run imports, and that the
lazily imported parts (json, decimal, inferred types) still work."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sandbox import create
from jupyter_sandbox.sandbox._io import stage_program

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

HEAVY = ("json", "re", "enum", "typing", "decimal")
"""Modules that cost milliseconds each to import at every run's start."""


def test_a_run_with_int_input_and_output_imports_none_of_the_heavy_modules() -> None:
    code = f"import sys\nloaded = ','.join(m for m in {HEAVY!r} if m in sys.modules)\ny = x + 1"
    sandbox = create("start", code=code, inputs={"x": int}, outputs={"y": int, "loaded": str})
    assert sandbox.execute({"x": 41}).outputs == {"y": 42, "loaded": ""}


def test_lazily_imported_codecs_and_inferred_types_still_work() -> None:
    code = "d = {'k': [x, str(t)]}\nu = t * 2\nv = 1.5"
    sandbox = create(
        "lazy",
        code=code,
        inputs={"x": int, "t": dt.timedelta},
        outputs={"d": dict, "u": dt.timedelta, "v": None},
    )
    result = sandbox.execute({"x": 1, "t": dt.timedelta(seconds=1.25)})
    assert result.outputs == {
        "d": {"k": [1, "0:00:01.250000"]},
        "u": dt.timedelta(seconds=2.5),
        "v": 1.5,
    }


def test_the_cells_lines_show_in_its_own_tracebacks_and_warnings() -> None:
    """The runner registers the cell's source only when linecache is first imported."""
    code = (
        "import traceback, warnings\n"
        "try:\n"
        "    1 / 0  # the failing line\n"
        "except ZeroDivisionError:\n"
        "    shown = traceback.format_exc()\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    warnings.warn('again')\n"
        "shown += warnings.formatwarning(*[getattr(caught[0], a) for a in "
        "('message', 'category', 'filename', 'lineno')])\n"
        "z: int = 1\n"
        "kinds = str(type(__annotations__['z']))\n"
    )
    sandbox = create("lines", code=code, outputs={"shown": str, "kinds": str})
    shown, kinds = sandbox.run()
    assert "1 / 0  # the failing line" in shown
    assert "warnings.warn('again')" in shown
    assert kinds == "<class 'type'>"  # the cell's annotations are evaluated: no inherited future


def test_the_staged_codec_loads_from_its_bytecode_not_its_source(tmp_path: Path) -> None:
    stage_program(tmp_path, mode="auto", code="y = 1", inputs={}, outputs={"y": int})
    verbose = subprocess.run(
        [sys.executable, "-v", "-B", "-c", "import jsbx_codec; print(jsbx_codec.encode('int', 7))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert verbose.stdout == "b'7'\n"
    assert f"code object from '{tmp_path}/__pycache__/jsbx_codec" in verbose.stderr


@pytest.mark.parametrize("outputs", [{}, {"y": int}], ids=["no output", "typed output"])
def test_what_the_code_leaves_at_the_runners_record_is_cleared(outputs) -> None:
    """With no type to infer the runner writes no record (so a run with no output runs no
    ``tar``), and clears whatever the code left at the record's name: a FIFO there was
    collected as an invalid output."""
    code = "import os\nos.mkfifo('/var/outputs/.inferred-types.json')\ny = 1\nprint('ok')"
    run = create("record", code=code, outputs=outputs, timeout=60).execute({})
    assert (run.stdout, run.outputs) == ("ok\n", {"y": 1} if outputs else {})
