"""The installed kernelspec and a real ipykernel: the extension loads at start, and
interrupting the kernel stops a running %%orchestrate cell and leaves the kernel usable."""

from __future__ import annotations

import json
import struct
import time

from _installed_kernel import execute


def test_kernelspec_is_installed_with_its_display_name_and_logos(kernel_prefix):
    folder = kernel_prefix / "share/jupyter/kernels/jupyter-sandbox"
    spec = json.loads((folder / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (sandbox)"
    assert "--ext=jupyter_sandbox._kernelspec" in spec["argv"]
    # The launcher and the kernel picker find the logos by these names, at these sizes.
    for size in (32, 64):
        png = (folder / f"logo-{size}x{size}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert struct.unpack(">II", png[16:24]) == (size, size)  # the IHDR chunk's width, height
    assert b"<svg" in (folder / "logo-svg.svg").read_bytes()


def test_load_ext_under_the_sandbox_kernel_is_quiet_and_keeps_the_magics(kernel):
    """A notebook written for any kernel starts with %load_ext: under this kernel it must not
    print "already loaded", nor replace the live magics (their instance keeps the journals)."""
    _, client = kernel
    before = "id(get_ipython().magics_manager.magics['cell']['orchestrate'].__self__)"
    reply, outputs = execute(client, f"_before = {before}\n%load_ext jupyter_sandbox")
    assert reply["status"] == "ok"
    assert [m for m in outputs if m["msg_type"] in ("stream", "error", "display_data")] == []
    reply, outputs = execute(client, f"{before} == _before")
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert results[0]["content"]["data"]["text/plain"] == "True"
    reply, outputs = execute(client, "%%orchestrate --quiet\n6 * 7")
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert results[0]["content"]["data"]["text/plain"] == "42"


def test_kernel_has_the_magics_without_load_ext(kernel):
    _, client = kernel
    reply, _ = execute(
        client,
        "from jupyter_sandbox import tool\n"
        "@tool\ndef add(x: int, y: int) -> int:\n    return x + y",
    )
    assert reply["status"] == "ok"
    reply, outputs = execute(client, "%%orchestrate --quiet\nprint('live')\nadd(20, 1) * 2")
    assert reply["status"] == "ok"
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert results[0]["content"]["data"]["text/plain"] == "42"
    streams = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
    assert "live" in streams


def test_interrupt_stops_a_running_cell_and_the_kernel_stays_usable(kernel):
    km, client = kernel
    msg_id = client.execute("%%orchestrate --timeout 120 --quiet\nwhile True:\n    pass")
    # Wait until the cell is running (busy), then interrupt like the notebook's stop button.
    while True:
        msg = client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            break
    time.sleep(0.5)
    km.interrupt_kernel()
    reply = client.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=60)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "Interrupted"  # not the 120 s time limit
    # ipykernel aborts requests that race its post-error queue flush, as in any frontend:
    # the kernel is usable once a request is not caught in that flush.
    for _ in range(5):
        reply, outputs = execute(client, "%%orchestrate --quiet\n1 + 1")
        if reply["status"] != "aborted":
            break
    assert reply["status"] == "ok"
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert results[0]["content"]["data"]["text/plain"] == "2"
