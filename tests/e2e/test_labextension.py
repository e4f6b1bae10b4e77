"""The JupyterLab extension is installed where JupyterLab finds it, enabled and healthy."""

from __future__ import annotations

import re
import subprocess
import sys


def test_labextension_is_listed_enabled_and_ok():
    listing = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("jupyter-sandbox ")]
    assert "enabled" in line
    assert "OK" in line
