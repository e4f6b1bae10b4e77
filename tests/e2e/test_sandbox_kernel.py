"""``%%sandbox`` in a real Jupyter kernel: output streams into the cell while the code still
runs, Ctrl-C (kernel interrupt) stops it, and kernel shutdown leaves no container."""

from __future__ import annotations

import time

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

CELL = """%%sandbox --timeout 300
import time
print("first", flush=True)
time.sleep(300)
print("never")
"""


def _kernel_containers(docker_engine, pid):
    labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={pid}"]
    return docker_engine.containers.list(all=True, filters={"label": labels}, sparse=True)


def _messages_until(client, msg_id, predicate):
    """iopub messages of one request, until ``predicate(msg)`` holds."""
    seen = []
    while True:
        msg = client.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        seen.append(msg)
        if predicate(msg):
            return seen


def _idle(msg):
    return msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"


def test_live_output_interrupt_and_shutdown(docker_engine):
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        pid = manager.provisioner.process.pid
        client.execute_interactive("%load_ext jupyter_sandbox", timeout=60)
        msg_id = client.execute(CELL)
        seen = _messages_until(
            client,
            msg_id,
            lambda m: m["msg_type"] == "stream" and "first" in m["content"]["text"],
        )
        # "first" reached the cell while the code is still running: no idle status yet
        assert not any(_idle(m) for m in seen)
        assert _kernel_containers(docker_engine, pid)
        manager.interrupt_kernel()
        rest = _messages_until(client, msg_id, _idle)
        errors = [m for m in rest if m["msg_type"] == "error"]
        assert errors
        assert errors[0]["content"]["traceback"] == ["interrupted: container stopped and removed"]
        assert not any("never" in m["content"].get("text", "") for m in rest)
    finally:
        manager.shutdown_kernel(now=False)
        client.stop_channels()
    for _ in range(100):  # the engine finishes removing what atexit asked it to remove
        if not _kernel_containers(docker_engine, pid):
            break
        time.sleep(0.1)
    assert not _kernel_containers(docker_engine, pid)
