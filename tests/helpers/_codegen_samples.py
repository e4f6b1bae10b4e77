"""A scripted model's replies for code generation: a program that sums a column, its tests,
and the same program with a bug (it skips the first row) and fixed."""

from __future__ import annotations

from jupyter_sandbox.codegen import format_reply

TOTAL = """\
import csv
with open(sales) as handle:
    rows = list(csv.DictReader(handle))
total = float(sum(float(row["amount"]) for row in rows{cut}))
"""


TESTS = """\
def test_the_samples_total(run):
    assert run()["total"] == {expected}

def test_one_row(run, tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("item,amount\\nx,5\\n")
    assert run(sales=str(path))["total"] == 5.0
"""


BUGGY = format_reply(
    plan="read the CSV and add up the amount column",
    code=TOTAL.format(cut="[1:]"),
    tests=TESTS.format(expected=6.0),
)


FIXED = format_reply(diagnosis="logic: rows[1:] skipped the first row", code=TOTAL.format(cut=""))
