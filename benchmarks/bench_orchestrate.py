"""Per-tool-call overhead of %%orchestrate against a bare pydantic-monty loop and plain CPython,
the cost of a durable run (a store) against today's path, and the latency of an empty cell.
Prints tables; medians over repeated interleaved rounds, with the machine's load.

    .venv/bin/python benchmarks/bench_orchestrate.py [--calls 1000] [--rounds 15] [--durable|--hot]
        [--profile] [--beside]

``--durable`` prints only the durable table (store on vs off, sync and async tools); ``--hot``
only the three tool-call rows with goals (sync call, awaited async call, gather),
each against its own baseline measured in the same rounds, in wall time and in the CPU time
of this process (the host's side: it moves much less with the machine's load). ``--profile``
adds where each row's time goes: the host's CPU, the worker processes' CPU, and the crossing
(the rest of the wall time: the pipe both ways and waiting for a core). ``--beside`` prints
only the oddity of the sync row's neighbours: the sync row alone, beside a second worker pool,
and beside its loop.

Baselines: the bare ``feed_start``/``resume`` loop, the fastest way to drive Monty by hand;
for an async call the same loop answering ``{"future": ...}`` and settling it with the
coroutine's value (run to its end right there, no event loop); for ``gather`` CPython's own
``asyncio.gather`` of the same coroutines. Floor rows say what no host driving Monty by hand
can beat: the async loop with each coroutine a task of an event loop in another thread (async
tools share one loop: clients bound to it work across cells) or of the driving thread's own
loop (no hand-over), and the gather's calls issued with no tool work at all, then settled
``NAP`` s after the last.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pydantic_monty as pm
from _timing import descendants_cpu, measure, measure_split, print_table
from IPython.core.interactiveshell import InteractiveShell
from jupyter_client.manager import KernelManager

from jupyter_sandbox import Interrupted, Limits, Store, orchestrate, tool
from jupyter_sandbox.orchestration._workers import pool, tool_loop


def add(x: int, y: int) -> int:
    return x + y


def loop_code(n: int) -> str:
    return f"acc = 0\nfor i in range({n}):\n    acc = add(acc, i)\nacc"


def bare_monty(code: str, workers: pm.Monty | None = None) -> None:
    """The baseline: one session (of ``workers``, else our pool), answer each FunctionSnapshot
    by calling the function."""
    with (workers or pool()).checkout(limits={"max_suspensions": 10**7}) as session:
        snap = session.feed_start(code)
        while not isinstance(snap, pm.MontyComplete):
            assert isinstance(snap, pm.FunctionSnapshot)
            snap = snap.resume({"return_value": add(*snap.args)})


async def aadd(x: int, y: int) -> int:
    return x + y


async def nap(i: int) -> int:
    await asyncio.sleep(NAP)
    return i


NAP = 0.2
"""Seconds each tool of the ``gather`` row sleeps."""


def await_code(n: int) -> str:
    return f"acc = 0\nfor i in range({n}):\n    acc = await aadd(acc, i)\nacc"


def gather_code(n: int) -> str:
    return f"import asyncio\nlen(await asyncio.gather(*[nap(i) for i in range({n})]))"


def _ran(coro: Coroutine[Any, Any, Any]) -> Any:
    """The value of a coroutine that never suspends, run to its end without a loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the coroutine suspended")


def bare_monty_async(code: str) -> None:
    """The async baseline: answer each call with a future, settle every pending one at each
    FutureSnapshot with its coroutine's value."""
    with pool().checkout(limits={"max_suspensions": 10**7}) as session:
        snap = session.feed_start(code)
        waiting: dict[int, Any] = {}
        while not isinstance(snap, pm.MontyComplete):
            if isinstance(snap, pm.FutureSnapshot):
                settled = {i: {"return_value": waiting.pop(i)} for i in snap.pending_call_ids}
                snap = snap.resume(settled)
                continue
            assert isinstance(snap, pm.FunctionSnapshot)
            waiting[snap.call_id] = _ran(aadd(*snap.args))
            snap = snap.resume({"future": ...})


def bare_monty_on_loop(code: str, loop: asyncio.AbstractEventLoop) -> None:
    """The async baseline with each coroutine run as a task of ``loop``: in another thread, as
    any host whose async tools share one event loop must (the floor for `orchestrate`'s
    awaited call; handed over as the call is answered with a future, waited for at the
    FutureSnapshot), or, for a loop not running, on this thread (no hand-over at all)."""
    with pool().checkout(limits={"max_suspensions": 10**7}) as session:
        snap = session.feed_start(code)
        waiting: dict[int, Any] = {}
        here = not loop.is_running()
        while not isinstance(snap, pm.MontyComplete):
            if isinstance(snap, pm.FutureSnapshot):
                ids = snap.pending_call_ids
                if here:
                    settled = {i: loop.run_until_complete(waiting.pop(i)) for i in ids}
                else:
                    settled = {i: waiting.pop(i).result() for i in ids}
                snap = snap.resume({i: {"return_value": v} for i, v in settled.items()})
                continue
            assert isinstance(snap, pm.FunctionSnapshot)
            coro = aadd(*snap.args)
            waiting[snap.call_id] = (
                loop.create_task(coro) if here else asyncio.run_coroutine_threadsafe(coro, loop)
            )
            snap = snap.resume({"future": ...})


def bare_monty_issue(code: str) -> None:
    """The floor of the gather row for any host driving Monty by hand: every call answered
    with a future as fast as Monty asks, the tools taking `NAP` s from the last one's issue
    (no tool runs at all), then every future settled at once."""
    with pool().checkout(limits={"max_suspensions": 10**7}) as session:
        snap = session.feed_start(code)
        issued = []
        while isinstance(snap, pm.FunctionSnapshot):
            issued.append(snap.call_id)
            snap = snap.resume({"future": ...})
        time.sleep(NAP)
        while isinstance(snap, pm.FutureSnapshot):
            snap = snap.resume({i: {"return_value": i} for i in snap.pending_call_ids})


def cpython_gather(n: int) -> None:
    async def main() -> None:
        await asyncio.gather(*[nap(i) for i in range(n)])

    asyncio.run(main())


def hot_table(n: int, rounds: int, profile: bool = False) -> None:
    """The tool-call rows with goals, each with its baseline in the same interleaved rounds:
    a sync call through the API (<= 1.1x the bare loop), an awaited async call (<= 1.2x the
    bare future + settle loop), a gather of ``n`` tools sleeping `NAP` s (<= 1.15x CPython).
    The two async tables have floor rows: what bare Monty costs with the coroutines on an
    event loop (another thread's, or this thread's own), and with no tool work at all."""
    tools = [add, aadd, nap]
    sync_code, async_code, many = loop_code(n), await_code(n), gather_code(n)
    loop, own = tool_loop(), asyncio.new_event_loop()

    def api(code: str) -> Callable[[], object]:
        return lambda: orchestrate(code, tools=tools, type_check=False)

    tables = [
        (
            f"sync tool call, {n} per cell",
            n,
            "us",
            [("bare feed_start/resume loop (baseline)", lambda: bare_monty(sync_code)),
             ("orchestrate() API, sync tool", api(sync_code))],
        ),
        (
            f"async tool call awaited, {n} per cell",
            n,
            "us",
            [("bare Monty future + settle (baseline)", lambda: bare_monty_async(async_code)),
             ("floor: the same, coroutines on a loop thread",
              lambda: bare_monty_on_loop(async_code, loop)),
             ("floor: the same, on this thread's own loop",
              lambda: bare_monty_on_loop(async_code, own)),
             ("orchestrate() API, awaited async tool", api(async_code))],
        ),
        (
            f"gather of {n} async tools sleeping {NAP} s, per cell",
            1,
            "ms",
            [("CPython asyncio.gather (baseline)", lambda: cpython_gather(n)),
             (f"floor: bare Monty issuing, {NAP} s, settling", lambda: bare_monty_issue(many)),
             ("orchestrate() API, asyncio.gather", api(many))],
        ),
    ]  # fmt: skip
    load = os.getloadavg()[0]
    rows = [row for *_, table_rows in tables for row in table_rows]
    timed = iter(measure_split(rows, rounds))
    after = os.getloadavg()[0]
    for title, per, unit, table_rows in tables:
        split = [next(timed) for _ in table_rows]
        head = f"{title}, median of {rounds} interleaved rounds (load {load:.2f} -> {after:.2f})"
        print_table(head, [(label, wall) for label, wall, _, _ in split], per=per, unit=unit)
        print_table(
            f"{title}: CPU time of this process (the host's side, every thread), median of "
            f"{rounds} rounds",
            [(label, host) for label, _, host, _ in split],
            per=per,
            unit=unit,
        )
        if profile:
            print_split(title, split, per)


def print_split(title: str, split: list[tuple[str, float, float, float]], per: int) -> None:
    """Where each row's time goes: the host's CPU (this process), the worker's CPU (Monty's
    processes), and the crossing (the rest of the wall time: the hand-over through the pipe
    both ways and waiting for a core, which is what the machine's load moves)."""
    print(f"\nwhere the time goes: {title} (us per {'call' if per > 1 else 'cell'})")
    print(f"{'':44} {'wall':>8} {'host':>8} {'worker':>8} {'crossing':>9}")
    for label, wall, host, worker in split:
        cross = wall - host - worker
        cells = (f"{x / per * 1e6:8.1f}" for x in (wall, host, worker))
        print(f"{label:44} {' '.join(cells)} {cross / per * 1e6:9.1f}")


def beside_table(n: int, rounds: int) -> None:
    """The neighbours' oddity (our sync call 55 us beside one benchmark, 87 us beside a bare Monty
    loop with a worker pool of its own): the sync row alone, beside a second
    ``pydantic_monty.Monty`` pool left idle, and with that pool's own loop interleaved; with
    what idle workers burn, and the full garbage collections the rounds triggered."""
    code = loop_code(n)

    def ours() -> None:
        orchestrate(code, tools=[add], type_check=False)

    def ours_pool() -> None:
        bare_monty(code)

    rows: list[tuple[str, Callable[[], object]]] = [
        ("orchestrate() API, sync tool", ours),
        ("bare loop, our pool", ours_pool),
    ]
    other = pm.Monty()
    print(
        f"\nthe neighbours' oddity: sync call, {n} per cell, median of {rounds} interleaved rounds"
    )
    print(f"{'us per call':44} {'wall':>8} {'host':>8} {'worker':>8}")
    for condition in ("alone", "a second pool idle", "a second pool's loop interleaved"):
        if condition == "a second pool idle":
            other.__enter__()
            bare_monty(code, other)  # its worker started and warm, then left alone
            before = descendants_cpu()
            time.sleep(2)
            print(f"(idle workers of both pools: {descendants_cpu() - before:.2f} s CPU in 2 s)")
        if condition.endswith("interleaved"):
            rows.append(("bare loop, the second pool", lambda: bare_monty(code, other)))
        print(f"{condition} (load {os.getloadavg()[0]:.2f})")
        collected = gc.get_stats()[2]["collections"]
        split = measure_split(rows, rounds)
        full = gc.get_stats()[2]["collections"] - collected
        for label, wall, host, worker in split:
            cells = " ".join(f"{x / n * 1e6:8.1f}" for x in (wall, host, worker))
            print(f"  {label:42} {cells}")
        print(f"  (full garbage collections in these rounds: {full})")
    other.__exit__(None, None, None)


def durable_table(n: int, rounds: int) -> None:
    """Per call: a durable run (a store in a temporary folder: records written in batches with
    a checkpoint or once a second, a checkpoint at most once a second for these plain tools)
    against the same run without one."""
    sync_code, async_code = loop_code(n), loop_code(n).replace("add(", "await aadd(")
    tools = [add, aadd]
    with tempfile.TemporaryDirectory() as folder:
        store = Store(os.path.join(folder, "store.sqlite"), keep=2)

        def run(code: str, durable: bool) -> Callable[[], object]:
            return lambda: orchestrate(
                code, tools=tools, type_check=False, store=store if durable else None
            )

        rows = [
            ("sync tool, no store (today's path)", run(sync_code, False)),
            ("sync tool, store", run(sync_code, True)),
            ("async tool, no store", run(async_code, False)),
            ("async tool, store", run(async_code, True)),
        ]
        load = os.getloadavg()[0]
        timed = measure(rows, rounds)
        print_table(
            f"durable runs: per tool call, {n} calls per run, median of {rounds} interleaved "
            f"rounds (load {load:.2f} -> {os.getloadavg()[0]:.2f})",
            timed,
            per=n,
        )
        store.close()


def cpython(n: int) -> None:
    acc = 0
    for i in range(n):
        acc = add(acc, i)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--durable", action="store_true", help="only the durable-run table")
    parser.add_argument("--hot", action="store_true", help="only the tool-call rows with goals")
    parser.add_argument(
        "--beside", action="store_true", help="only the sync row beside an idle pool and its loop"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print where a tool call's time goes (host, worker, crossing)",
    )
    args = parser.parse_args()
    n, rounds = args.calls, args.rounds
    if args.beside:
        beside_table(n, rounds)
        return
    if not args.durable:
        hot_table(n, rounds, args.profile)
    if args.hot:
        return
    durable_table(n, rounds)
    if args.durable:
        return
    code = loop_code(n)
    add_tool = tool(add)

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_sandbox")
    shell.user_ns["add"] = add_tool

    def magic(checked: bool) -> Callable[[], object]:
        flags = "--quiet" + ("" if checked else " --no-type-check")
        return lambda: shell.run_cell_magic("orchestrate", flags, code)

    rows = [
        ("bare pydantic-monty loop (baseline)", lambda: bare_monty(code)),
        ("orchestrate() API", lambda: orchestrate(code, tools=[add_tool], type_check=False)),
        ("%%orchestrate --no-type-check", magic(False)),
        ("%%orchestrate (type-checked)", magic(True)),
        ("plain CPython calls", lambda: cpython(n)),
    ]
    load = os.getloadavg()[0]
    timed = measure(rows, rounds)
    print_table(
        f"per tool call, {n} calls per cell, median of {rounds} interleaved rounds "
        f"(load {load:.2f} -> {os.getloadavg()[0]:.2f})",
        timed,
        per=n,
    )

    empty = [
        ("bare checkout + feed_run('')", lambda: _bare_empty()),
        (
            "%%orchestrate empty cell (pass)",
            lambda: shell.run_cell_magic("orchestrate", "--quiet", "pass"),
        ),
        (
            "%%orchestrate empty, --no-type-check",
            lambda: shell.run_cell_magic("orchestrate", "--quiet --no-type-check", "pass"),
        ),
    ]
    print_table(
        f"empty cell latency, median of {rounds * 4} interleaved runs",
        measure(empty, rounds * 4),
        unit="ms",
    )

    in_process = statistics.median(interrupt_latency() for _ in range(5))
    in_kernel = statistics.median(kernel_interrupt_latencies())
    print("\ninterrupt to stopped cell, median of 5")
    print(f"{'SIGINT in this process (orchestrate())':44} {in_process * 1e3:9.2f} ms")
    print(f"{'stop button in a real kernel (error reply)':44} {in_kernel * 1e3:9.2f} ms")


def interrupt_latency() -> float:
    """Seconds from SIGINT (what the notebook's stop button sends) to the cell stopping."""
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Timer(0.3, fire).start()
    try:
        orchestrate("while True:\n    pass", tools=[], limits=Limits(timeout=60))
    except Interrupted:
        return time.perf_counter() - fired[0]
    raise AssertionError("the cell was not interrupted")


def kernel_interrupt_latencies(runs: int = 5) -> list[float]:
    """Seconds from the notebook's stop button (``interrupt_kernel``) to the cell's error
    reply, in a real ipykernel running a busy %%orchestrate cell."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    client = km.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)

    def reply_to(msg_id: str) -> dict[str, Any]:
        while True:
            reply: dict[str, Any] = client.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    try:
        reply_to(client.execute("%load_ext jupyter_sandbox"))
        stops = []
        for _ in range(runs):
            msg_id = client.execute("%%orchestrate --timeout 120 --quiet\nwhile True:\n    pass")
            time.sleep(1.0)  # well inside the cell
            start = time.perf_counter()
            km.interrupt_kernel()
            reply = reply_to(msg_id)
            stops.append(time.perf_counter() - start)
            assert reply["content"]["ename"] == "Interrupted", reply["content"]
            time.sleep(0.5)  # past ipykernel's post-error abort window
        return stops
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def _bare_empty() -> None:
    with pool().checkout() as session:
        session.feed_run("")


if __name__ == "__main__":
    main()
