"""``%%codegen`` in a real Jupyter kernel against the real Docker engine: the live view of
each iteration, the ``%%sandbox`` cell it inserts (which runs as it is), ``--out`` bound from
a run on the whole ``--in`` data, a clear error when the iterations run out, ``--resume``
after the kernel was killed mid-generation, and the cache."""

from __future__ import annotations

import time

import nbformat
import pytest
from _codegen_samples import BUGGY, FIXED, TESTS, TOTAL
from _kernels import Kernel, kernel

from jupyter_sandbox.codegen import format_reply

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

SETUP = """
import pandas as pd
from jupyter_sandbox import File, ScriptedLLM
from pathlib import Path
Path("{folder}").mkdir(exist_ok=True)
Path("{folder}/sales.csv").write_text("item,amount\\na,1\\nb,2\\nc,3\\n")
sales = File("{folder}/sales.csv")
model = ScriptedLLM({replies!r})
"""
CELL = "%%codegen --llm model --in sales --out total:float\nTotal of the amount column\n"


def markdown(ran) -> str:
    return "\n".join(
        m["content"]["data"].get("text/markdown", "")
        for m in ran.outputs
        if m["msg_type"] == "display_data"
    )


def test_the_cell_shows_each_iteration_inserts_a_sandbox_cell_and_binds_out(tmp_path) -> None:
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok(SETUP.format(folder=tmp_path / "data", replies=[BUGGY, FIXED]))
        ran = k.ok(CELL + "- amounts are numbers\n", timeout=600)
        shown = markdown(ran)
        assert "**Iteration 1 of 10**" in shown
        assert "Plan: read the CSV and add up the amount column" in shown
        assert "✘ `test_the_samples_total` failed" in shown
        assert "Diagnosis: **logic error**" in shown
        assert "```diff" in shown  # iteration 2 shows the code's diff
        assert "✔ `test_one_row` passed" in shown
        assert "Iteration 2: tests passed" in shown
        assert "**Tests passed after 2 iteration(s)**" in shown
        assert "The tests that passed:" in shown and "def test_one_row" in shown
        assert ran.value is None  # the view showed the result; no repr of it below
        assert "- amounts are numbers" in k.ok("print(model.requests[0][1]['content'])").text
        (inserted,) = [p["text"] for p in ran.payload if p.get("source") == "set_next_input"]
        header, mark, body = inserted.split("\n", 2)
        assert header == "%%sandbox --in sales --out total:float"
        assert mark.startswith("# inserted by %%codegen, cell ")
        assert "rows[1:]" not in body
        assert k.ok("print(total)").text.strip() == "6.0"
        k.ok("del total")
        k.ok(inserted, timeout=300)  # the inserted cell runs as it is
        assert k.ok("print(total)").text.strip() == "6.0"


def test_out_is_bound_from_the_whole_dataframe_not_the_sample(tmp_path) -> None:
    code = (
        "import csv\nwith open(sales) as f:\n    rows = list(csv.DictReader(f))\n"
        "total = float(sum(float(r['amount']) for r in rows))\n"
    )
    tests = "def test_a_float(run):\n    assert isinstance(run()['total'], float)\n"
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok(SETUP.format(folder=tmp_path / "data", replies=[format_reply(code=code, tests=tests)]))
        k.ok("sales = pd.DataFrame({'amount': range(1000)})")
        ran = k.ok(CELL.replace("--in sales", "--in sales --max-sample-rows 3"), timeout=600)
        assert k.ok("print(total)").text.strip() == str(float(sum(range(1000))))
        sent = k.ok("print(model.requests[0][1]['content'])").text
        assert "1000 rows" in sent
        assert "\n999\n" not in sent
        k.ok("del total")
        (inserted,) = [p["text"] for p in ran.payload if p.get("source") == "set_next_input"]
        assert inserted.startswith("%%sandbox --in sales_csv --out total:float\n")
        assert "\nsales = sales_csv  # the CSV of the DataFrame sales\n" in inserted
        k.ok(inserted, timeout=300)  # runs as it is, on the CSV of the whole DataFrame
        assert k.ok("print(total)").text.strip() == str(float(sum(range(1000))))


def test_running_out_of_iterations_is_one_clear_error(tmp_path) -> None:
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok(SETUP.format(folder=tmp_path / "data", replies=[BUGGY, BUGGY]))
        ran = k.run(CELL.replace("--llm model", "--llm model --max-iterations 2"), timeout=600)
        assert ran.status == "error"
        assert "UsageError: %%codegen: no passing tests after 2 iteration(s)" in ran.text
        assert ran.payload == []  # nothing inserted
        assert "Iteration 2: failed" in markdown(ran)
        assert "**No passing tests after 2 iteration(s)**" in markdown(ran)


def test_resume_after_the_kernel_was_killed_asks_the_model_for_the_rest_only(tmp_path) -> None:
    """The model kills its own kernel (``kill -9``) when asked for iteration 3; a new kernel
    runs the cell again with ``--resume``: iterations 1 and 2 come from the journal, their
    tests do not run again, and the model is asked once."""
    store = tmp_path / "store.sqlite"
    buggy_again = format_reply(code=TOTAL.format(cut="[2:]"))
    dying = SETUP + (
        "import os, signal\n"
        "def scripted(messages):\n"
        "    if len(model.requests) == 2:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return model(messages)\n"
    )
    first = Kernel(store)
    try:
        first.ok("%load_ext jupyter_sandbox")
        first.ok(dying.format(folder=tmp_path / "data", replies=[BUGGY, buggy_again]))
        first.start(CELL.replace("--llm model", "--llm scripted"))
        deadline = time.monotonic() + 300
        while first.km.is_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not first.km.is_alive()
    finally:
        first.close()
    with kernel(store) as k:
        k.ok(dying.format(folder=tmp_path / "data", replies=[FIXED, FIXED, FIXED]))
        ran = k.ok(CELL.replace("--llm model", "--llm scripted --resume"), timeout=600)
        shown = markdown(ran)
        assert shown.count("(from the journal: the model was not asked again)") == 2
        assert "Iteration 3: tests passed" in shown
        assert k.ok("print(len(model.requests))").text.strip() == "1"
        again = k.ok(CELL.replace("--llm model", "--llm scripted"), timeout=600)
        assert "the cached result of this task" in again.text
        assert k.ok("print(len(model.requests))").text.strip() == "1"


@pytest.mark.browser
def test_jupyterlab_rerun_replaces_the_inserted_sandbox_cell(browser, tmp_path) -> None:
    """A real kernel in JupyterLab: a second ``%%codegen`` run's new code takes the place of
    the ``%%sandbox`` cell the first run inserted (our extension's insert plugin)."""
    from _jupyterlab import Lab, notebook_js, sources, wait_kernel_ready
    from _jupyterlab import run_cell_waiting as run_cell

    two = format_reply(
        code=TOTAL.format(cut="").replace("total =", "total = 0.0 +"),
        tests=TESTS.format(expected=6.0),
    )
    setup = SETUP.format(folder=tmp_path / "data", replies=[BUGGY, FIXED, two])
    cell = CELL.replace("--llm model", "--llm model --no-cache")
    (tmp_path / "root").mkdir()
    cells = [nbformat.v4.new_code_cell("%load_ext jupyter_sandbox\n" + setup)]
    cells.append(nbformat.v4.new_code_cell(cell))
    kernelspec = {"name": "python3", "display_name": "Python 3"}
    notebook = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": kernelspec})
    nbformat.write(notebook, tmp_path / "root" / "codegen.ipynb")
    lab = Lab(tmp_path / "root", tmp_path / "home")
    try:
        page = browser.new_page(viewport={"width": 1100, "height": 800})
        lab.open(page, "codegen.ipynb")
        wait_kernel_ready(page)
        for index in (0, 1):
            run_cell(page, index)
        first = sources(page)
        assert len(first) == 3
        assert first[2].startswith("%%sandbox --in sales --out total:float\n# inserted by")
        run_cell(page, 1)  # new code: it replaces the copy below
        page.wait_for_function(
            "() => { const cells = window.jupyterapp.shell.currentWidget.content.widgets;"
            " return cells.length === 3"
            " && cells[2].model.sharedModel.source.includes('total = 0.0 +'); }",
            timeout=60_000,
        )
        assert sources(page)[2].split("\n")[1] == first[2].split("\n")[1]  # the same mark
        assert notebook_js(page, "return panel.content.widgets.length;") == 3
    finally:
        lab.stop()
