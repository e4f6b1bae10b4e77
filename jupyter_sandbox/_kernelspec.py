"""The "Python 3 (sandbox)" kernelspec: an ipykernel that loads the extension at start."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

KERNEL_NAME = "jupyter-sandbox"
DISPLAY_NAME = "Python 3 (sandbox)"


def kernel_json(python: str = sys.executable) -> dict[str, object]:
    """The kernel.json content; ``--ext`` makes IPython load the extension before any cell."""
    return {
        "argv": [
            python,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--ext=jupyter_sandbox",
        ],
        "display_name": DISPLAY_NAME,
        "language": "python",
        "metadata": {"debugger": True},
    }


def install_kernel(*, user: bool = False, prefix: str | None = None) -> str:
    """Install the kernelspec and return the folder it went to.

    Defaults to ``sys.prefix`` (the active venv) so it never touches other environments.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(kernel_json(), indent=2))
        if not user and prefix is None:
            prefix = sys.prefix
        dest: str = KernelSpecManager().install_kernel_spec(
            tmp, KERNEL_NAME, user=user, prefix=prefix
        )
    return dest
