"""The "Python 3 (sandbox)" kernelspec: an ipykernel that loads the extension at start.

The kernel loads the extension through this module (``--ext=jupyter_sandbox._kernelspec``), not
as ``jupyter_sandbox``: IPython then does not list ``jupyter_sandbox`` as loaded, so a notebook
written for any kernel can still start with ``%load_ext jupyter_sandbox`` and get no "already
loaded" message under this one (`jupyter_sandbox.load_ipython_extension` sees the magics live
and keeps them).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

KERNEL_NAME = "jupyter-sandbox"
DISPLAY_NAME = "Python 3 (sandbox)"
# The names Jupyter looks for in a kernelspec folder (the launcher and the kernel picker).
LOGOS = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")


def kernel_json(python: str = sys.executable) -> dict[str, object]:
    """The kernel.json content; ``--ext`` makes IPython load the extension before any cell."""
    return {
        "argv": [
            python,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            f"--ext={__name__}",
        ],
        "display_name": DISPLAY_NAME,
        "language": "python",
        "metadata": {"debugger": True},
    }


def install_kernel(*, user: bool = False, prefix: str | None = None) -> str:
    """Install the kernelspec (kernel.json and the logos) and return the folder it went to.

    Defaults to ``sys.prefix`` (the active venv) so it never touches other environments; where
    that is not writable (a system or shared environment, a user who is not root) to the user's
    own folder, which every Jupyter this user runs reads, instead of failing.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    resources = files("jupyter_sandbox") / "resources"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(kernel_json(), indent=2))
        for name in LOGOS:
            (Path(tmp) / name).write_bytes((resources / name).read_bytes())
        if not user and prefix is None:
            user = not os.access(sys.prefix, os.W_OK)
            prefix = None if user else sys.prefix
        dest: str = KernelSpecManager().install_kernel_spec(
            tmp, KERNEL_NAME, user=user, prefix=prefix
        )
    return dest


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """The kernel's start-up hook (see the module docstring for why it is not the package's)."""
    from . import load_ipython_extension as load

    load(ipython)
