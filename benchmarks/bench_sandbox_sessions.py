"""Benchmark of sandbox sessions (``create_session``, ``%%sandbox --session``); prints tables,
each row against a baseline measured in the same run.

    .venv/bin/python benchmarks/bench_sandbox_sessions.py [--rounds N] [--no-frame]

- a cell in a running session (``x = 1``, then ``print(x)``) against a local ipykernel's
  execute of the same two cells (jupyter_client, the kernel's own round trip);
- starting a session (its server up and greeted) against a warm one-shot run of the same
  image, each with its spare up before the round (a session's is a ready session: a container
  whose server already runs, waiting for its first hello);
- snapshot and fork of a session holding a 100 MB DataFrame, against building that frame again
  in a fresh one-shot run (what a session saves a notebook from);
- 16 sessions started at once, against one, and the memory each idle session holds (its
  container's cgroup, as the session reports it).

Rows take turns each round (medians). A script, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from _timing import measure_prepared, print_table
from jupyter_client.manager import KernelManager

from jupyter_sandbox import create
from jupyter_sandbox.sandbox import _kept, _session
from jupyter_sandbox.sandbox._pool import quiesce

FAN_OUT = 16
FRAME_CODE = (
    "import numpy as np, pandas as pd\n"
    "df = pd.DataFrame(np.random.default_rng(0).random((1_310_720, 10)))\n"  # 100 MiB of floats
)


def _kernel_cells(rounds: int) -> list[tuple[str, float]]:
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.blocking_client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    session = _session.create_session("bench_cells")
    try:

        def kernel_pair() -> None:
            kc.execute_interactive("x = 1", output_hook=lambda _m: None, timeout=30)
            kc.execute_interactive("print(x)", output_hook=lambda _m: None, timeout=30)

        def session_pair() -> None:
            session.execute("x = 1")
            session.execute("print(x)", on_stream=lambda _n, _t: None)

        return measure_prepared(
            [
                ("local ipykernel: x = 1; print(x) (baseline)", lambda: None, kernel_pair),
                ("session: x = 1; print(x)", lambda: None, session_pair),
            ],
            rounds,
        )
    finally:
        session.close()
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _starts(rounds: int) -> list[tuple[str, float]]:
    spec = _session.session_spec()
    one_shot = create("bench_one_shot", code="pass", packages=list(_session.SERVER_PACKAGES))
    one_shot.run()  # its spare, from now on

    def start_and_close() -> None:
        session = _session.start_session("bench_start", spec)
        session.close()

    def ready() -> None:
        _session.wait_ready()  # the ready session of the spec is up (`_session._prepare`)
        quiesce()  # and the one-shot run's spare

    def no_ready() -> None:
        _session.discard_ready()  # the session claims a spare and starts its server itself
        quiesce()

    return measure_prepared(
        [
            ("warm one-shot run (baseline)", ready, one_shot.run),
            ("session start from its ready session", ready, start_and_close),
            ("session start from a spare (no ready one)", no_ready, start_and_close),
        ],
        rounds,
    )


def _frames(rounds: int) -> list[tuple[str, float]]:
    spec = _session.session_spec(packages=["pandas"], resources={"memory": "2g"})
    rebuild = create(
        "bench_frame",
        code=FRAME_CODE,
        packages=["pandas", "cloudpickle"],
        resources={"memory": "2g"},
    )
    session = _session.start_session("bench_frame", spec)
    session.run(FRAME_CODE)
    snaps: list[_session.Snapshot] = []

    def snapshot() -> None:
        snaps.append(session.snapshot("bench"))

    def fork() -> None:
        forked = _session.start_session_from("bench_fork", snaps[-1])
        forked.close()

    try:
        return measure_prepared(
            [
                ("one-shot run that builds the frame (baseline)", quiesce, rebuild.run),
                ("snapshot of a session holding it", quiesce, snapshot),
                ("fork from that snapshot (start + restore)", quiesce, fork),
            ],
            rounds,
        )
    finally:
        session.close()


def _fan_out() -> tuple[list[tuple[str, float]], float]:
    spec = _session.session_spec()

    def one(i: int) -> _session.SandboxSession:
        return _session.start_session(f"bench_many_{i}", spec)

    quiesce()
    start = time.perf_counter()
    single = one(99)
    alone = time.perf_counter() - start
    single.close()
    quiesce()
    start = time.perf_counter()
    with ThreadPoolExecutor(FAN_OUT) as pool:
        many = list(pool.map(one, range(FAN_OUT)))
    together = time.perf_counter() - start
    time.sleep(2)
    memory = statistics.median(float(s.info()["memory"] or 0) for s in many)
    for s in many:
        s.close()
    return [("one session start (baseline)", alone), (f"{FAN_OUT} at once", together)], memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-frame", action="store_true", help="skip the 100 MB DataFrame rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        import os

        os.environ[_kept.SESSION_DIR_ENV] = folder
        print_table("A cell in a session", _kernel_cells(args.rounds * 10), unit="ms")
        print_table("Starting a session", _starts(args.rounds), unit="ms")
        if not args.no_frame:
            print_table(
                "A session holding a 100 MB DataFrame", _frames(max(args.rounds // 3, 3)), unit="s"
            )
        rows, memory = _fan_out()
        print_table(f"{FAN_OUT} sessions at once", rows, unit="s")
        print(f"\nmemory per idle session (its cgroup): {memory / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
