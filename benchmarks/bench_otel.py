"""What OpenTelemetry tracing costs a tool call: the code before it, tracing off, tracing on.

    .venv/bin/python benchmarks/bench_otel.py [--before COMMIT] [--calls 500] [--rounds 9]
                                              [--off-only]

Three worker processes run the same runs: ``before`` imports jupyter_sandbox as it was at
COMMIT (default: the merge base with ``main``, extracted with ``git archive`` into a temporary
folder), ``off`` this tree with tracing off, ``on`` this tree with tracing on into an SDK
``TracerProvider`` whose exporter drops the spans (a batch processor, as a real exporter has:
the cost measured is making the spans, ours and Monty's, not sending them). The parent takes
the workers in turn each round (interleaved), so load that comes and goes hits them alike, and
prints medians per call against ``before``.

Rows: a loop of sync calls with nobody watching (the plain path: untraced, no event is built),
the same loop with an ``on_event`` callback (a live view: every call observed), and an awaited
async tool. Tracing on always takes the observed path (its spans are made from the events).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import print_table

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, time
mode = sys.argv[1]
if mode == "on":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
import jupyter_sandbox
from jupyter_sandbox import orchestrate
if mode != "before":
    from jupyter_sandbox._shared import _otel
    _otel.configure(mode == "on")
assert jupyter_sandbox.__file__.startswith(sys.argv[3]), jupyter_sandbox.__file__

def add(x: int, y: int) -> int:
    return x + y

async def aadd(x: int, y: int) -> int:
    return x + y

n = int(sys.argv[2])
codes = {
    "sync": f"acc = 0\nfor i in range({n}):\n    acc = add(acc, i)\nacc",
    "async": f"acc = 0\nfor i in range({n}):\n    acc = await aadd(acc, i)\nacc",
}
def watch(event):
    pass

for line in sys.stdin:
    kind, watched = line.split()
    start, cpu = time.perf_counter(), time.process_time()
    orchestrate(codes[kind], tools=[add, aadd], type_check=False,
                on_event=watch if watched == "1" else None)
    print(time.perf_counter() - start, time.process_time() - cpu, flush=True)
"""


def _before_tree(commit: str, folder: str) -> str:
    """The package as it was at ``commit``, in ``folder`` (only ``jupyter_sandbox/``)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "jupyter_sandbox"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


class _Worker:
    def __init__(self, mode: str, calls: int, path: str) -> None:
        env = {**os.environ, "PYTHONPATH": path}
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, mode, str(calls), path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=path,
        )

    def run(self, kind: str, watched: bool) -> tuple[float, float]:
        """One run's (wall, CPU) seconds, the CPU this process spent (Monty's worker apart)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"{kind} {int(watched)}\n")
        self.proc.stdin.flush()
        wall, cpu = self.proc.stdout.readline().split()
        return float(wall), float(cpu)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="commit to compare with (merge base)")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--off-only",
        action="store_true",
        help="before against tracing off only (what 'free when off' needs: more rounds sooner)",
    )
    args = parser.parse_args()
    before = (
        args.before
        or subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    with tempfile.TemporaryDirectory(prefix="bench-otel-") as folder:
        labels = {
            "before": f"before ({before[:7]})",
            "off": "tracing off",
            "on": "tracing on (spans made, export dropped)",
        }
        if args.off_only:
            del labels["on"]
        workers = {
            mode: _Worker(
                mode, args.calls, _before_tree(before, folder) if mode == "before" else str(ROOT)
            )
            for mode in labels
        }
        try:
            for kind, watched, title in (
                ("sync", False, "sync tool, nobody watching (plain path)"),
                ("sync", True, "sync tool, with on_event (observed path)"),
                ("async", False, "awaited async tool"),
            ):
                rows = [(label, workers[mode]) for mode, label in labels.items()]
                load = os.getloadavg()[0]
                wall, cpu = _interleaved(rows, kind, watched, args.rounds)
                for what, timed in (("wall time", wall), ("host CPU time", cpu)):
                    print_table(
                        f"OpenTelemetry: {title}, {what} per call, {args.calls} calls per run, "
                        f"median of {args.rounds} interleaved rounds (load {load:.2f} -> "
                        f"{os.getloadavg()[0]:.2f})",
                        timed,
                        per=args.calls,
                    )
        finally:
            for worker in workers.values():
                worker.close()


def _interleaved(
    rows: list[tuple[str, _Worker]], kind: str, watched: bool, rounds: int
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Median (wall, CPU) seconds per row, the workers taken in turn each round after a
    warm-up run, each round starting one row later (what a worker leaves running after its
    run, a span export, slows each row alike); each worker times its own run (the pipe's round
    trip left out). CPU time is what our code costs even on a machine others load."""
    samples: list[list[tuple[float, float]]] = [[] for _ in rows]
    for round_ in range(rounds + 1):
        for i in range(len(rows)):
            at = (i + round_) % len(rows)
            measured = rows[at][1].run(kind, watched)
            if round_:
                samples[at].append(measured)
    labelled = list(zip([label for label, _ in rows], samples, strict=True))
    return (
        [(label, statistics.median(wall for wall, _ in t)) for label, t in labelled],
        [(label, statistics.median(cpu for _, cpu in t)) for label, t in labelled],
    )


if __name__ == "__main__":
    main()
