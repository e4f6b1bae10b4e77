"""What a Dask cluster costs per run, against the same runs on the local engine.

Starts a scheduler and two workers (``dask scheduler``/``dask worker`` on loopback, both
workers on this machine's engine, 8 threads each), then measures, rounds interleaved:
a warm run spaced like cells (1 s apart) against the same run on the local engine, and a
fan-out of 16 runs from 16 threads against 16 parallel ``docker run --rm`` (the CLI, so the
baseline does not depend on our own local fan-out). On one machine the cluster can only add
cost (the scheduler hop, tar bytes both ways, events through the scheduler); the numbers say
how much. Run: ``.venv/bin/python benchmarks/bench_cluster.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _timing import measure_prepared, print_table

from jupyter_sandbox import create
from jupyter_sandbox.sandbox import default_base_image

ROUNDS = 7
FAN_OUT = 16


def _start_cluster(root: Path) -> tuple[str, list[subprocess.Popen]]:
    dask = str(Path(sys.executable).with_name("dask"))
    scheduler_file = root / "scheduler.json"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(scheduler_file)],
            start_new_session=True, **quiet,
        )
    ]  # fmt: skip
    while not scheduler_file.exists():
        time.sleep(0.1)
    for name in ("a", "b"):
        processes.append(
            subprocess.Popen(
                [dask, "worker", "--scheduler-file", str(scheduler_file), "--name", name,
                 "--nthreads", "8", "--no-dashboard", "--local-directory", str(root / name)],
                start_new_session=True, **quiet,
            )
        )  # fmt: skip
    address = json.loads(scheduler_file.read_text())["address"]
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=120)
    return address, processes


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="jsbx-bench-dask-"))
    address, processes = _start_cluster(root)
    from distributed import Client

    client = Client(address, set_as_default=False)
    try:
        spec = {"code": "y = x + 1", "inputs": {"x": int}, "outputs": {"y": int}}
        local = create("local", **spec)
        remote = create("remote", cluster=client, **spec)
        pool = ThreadPoolExecutor(FAN_OUT)

        def fan_out():
            return list(pool.map(lambda i: remote.run(x=i), range(FAN_OUT)))

        def cli_fan_out() -> None:
            command = ["docker", "run", "--rm", "--network", "none", default_base_image()]
            runs = [subprocess.Popen([*command, "python3", "-c", "pass"]) for _ in range(FAN_OUT)]
            assert all(run.wait() == 0 for run in runs)

        def pause() -> None:
            time.sleep(1.0)

        warm = measure_prepared(
            [
                ("local create().run, 1 s apart (baseline)", pause, lambda: local.run(x=1)),
                ("cluster create().run, 1 s apart", pause, lambda: remote.run(x=1)),
            ],
            ROUNDS,
        )
        spread = measure_prepared(
            [
                (f"{FAN_OUT} parallel docker run --rm (baseline)", pause, cli_fan_out),
                (f"cluster fan-out of {FAN_OUT}, 2 workers", pause, fan_out),
            ],
            ROUNDS,
        )
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {ROUNDS} rounds")
        print_table("warm run, median seconds", warm, unit="ms")
        print_table(f"fan-out of {FAN_OUT}, median seconds for all", spread, unit="s")
        for label, seconds in spread:
            print(f"{label:44} {FAN_OUT / seconds:12.2f} containers/s")
    finally:
        client.close()
        for process in reversed(processes):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(60)
        subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    main()
