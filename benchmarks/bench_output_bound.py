"""What bounding a JSON output costs the kernel before it decodes it: `_codec.json_size` (the
first count, and the count again without strings that a count over the bound makes) against
``json.loads`` of the same data, the baseline, and the decoded size it bounds (tracemalloc).
Medians of interleaved rounds, with the machine's load.

    .venv/bin/python benchmarks/bench_output_bound.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import tracemalloc

from _timing import measure, print_table

from jupyter_sandbox.sandbox._codec import json_size

SHAPES = {
    "records": json.dumps(
        [{"name": f"n{i}", "value": i * 1.5, "tags": ["x", str(i)]} for i in range(200_000)]
    ).encode(),
    "floats": json.dumps([i * 0.37 for i in range(500_000)]).encode(),
    "JSON text in strings": json.dumps(
        [json.dumps({"a": [i, 2], "b": {"c": "d"}}) for i in range(200_000)]
    ).encode(),
    "[[],[],...]": b"[" + b",".join([b"[]"] * (8 * 2**20 // 3)) + b"]",
}


def decoded(data: bytes) -> int:
    tracemalloc.start()
    value = json.loads(data)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del value
    return size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for label, data in SHAPES.items():
        load = os.getloadavg()[0]
        table = measure(
            [
                ("json.loads (baseline)", lambda d=data: json.loads(d)),
                ("json_size, first count", lambda d=data: json_size(d, 2**62)),
                ("json_size, counted again", lambda d=data: json_size(d, 0)),
            ],
            args.rounds,
        )
        print_table(
            f"{label}, {len(data) / 2**20:.1f} MiB: median of {args.rounds} interleaved rounds "
            f"(load {load:.2f} -> {os.getloadavg()[0]:.2f})",
            table,
            unit="ms",
        )
        real = decoded(data)
        first, again = json_size(data, 2**62) / real, json_size(data, 0) / real
        print(
            f"  decoded {real / 2**20:.0f} MiB (x{real / len(data):.1f} the data); bounded at "
            f"{first:.2f}x it, counted again {again:.2f}x"
        )


if __name__ == "__main__":
    main()
