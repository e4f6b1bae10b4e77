"""The kernel users install: the ``jupyter-sandbox`` kernelspec written into a fresh prefix
(``python -m jupyter_sandbox install-kernel --prefix``) and a real ipykernel started from it,
one per test module, with `execute` to run code in it and read its replies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager


@pytest.fixture(scope="module")
def kernel_prefix(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("prefix")
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_sandbox", "install-kernel", "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Python 3 (sandbox)" in done.stdout
    return prefix


@pytest.fixture(scope="module")
def kernel(kernel_prefix) -> Iterator[tuple[KernelManager, object]]:
    ksm = KernelSpecManager(kernel_dirs=[str(kernel_prefix / "share" / "jupyter" / "kernels")])
    km = KernelManager(kernel_name="jupyter-sandbox", kernel_spec_manager=ksm)
    km.start_kernel()
    client = km.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    yield km, client
    client.stop_channels()
    km.shutdown_kernel(now=True)


def execute(client, code: str, timeout: float = 60) -> tuple[dict, list[dict]]:
    """Run code; return the reply content and the iopub messages of this request."""
    msg_id = client.execute(code)
    reply = client.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=timeout)
    outputs = []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        outputs.append(msg)
    return reply["content"], outputs
