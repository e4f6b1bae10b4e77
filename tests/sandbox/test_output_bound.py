"""The bound on decoded JSON outputs (README safety table: a JSON output was decoded whole, ~21
times its size for ``[[],[],...]``): `_codec.json_size` bounds the objects ``json.loads``
builds, measured here with tracemalloc, and `collect_outputs` refuses JSON outputs that
together would pass the run's memory limit, before decoding them."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from jupyter_sandbox.errors import OutputLimitExceeded
from jupyter_sandbox.sandbox._codec import INFERRED_TYPES, json_size
from jupyter_sandbox.sandbox._io import collect_outputs

N = 20_000
SHAPES = {
    "empty lists": b"[" + b",".join([b"[]"] * N) + b"]",
    "lists of floats": b"[" + b",".join([b"[[[1e5]]]"] * N) + b"]",
    "big ints": json.dumps(list(range(10**6, 10**6 + N))).encode(),
    "floats": json.dumps([i * 0.5 for i in range(N)]).encode(),
    "pairs": json.dumps([[i, -i] for i in range(N)]).encode(),
    "records": json.dumps(
        [{"name": f"n{i}", "value": i * 1.5, "tags": ["x", f"{i}"]} for i in range(N)]
    ).encode(),
    "distinct keys": json.dumps({f"key{i}": 10**6 + i for i in range(N)}).encode(),
    "nested dicts": json.dumps([{"a": {"b": {}}} for _ in range(N)]).encode(),
    "strings": json.dumps([f"s{i}" * 5 for i in range(N)]).encode(),
    "an emoji makes a string 4 bytes a character": json.dumps(["😀" + "a" * 10**5]).encode(),
    "the same, raw": json.dumps(["😀" + "a" * 10**5], ensure_ascii=False).encode(),
    "deep": b"[" * 900 + b"]" * 900,
}


def decoded(data: bytes) -> int:
    """Bytes json.loads holds once done (the value kept alive while measuring)."""
    tracemalloc.start()
    try:
        value = json.loads(data)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert value is not None
    return size


@pytest.mark.parametrize("shape", SHAPES)
def test_the_estimate_bounds_the_decoded_objects_closely(shape):
    data = SHAPES[shape]
    real = decoded(data)
    for bound in (0, 2**62):  # counted once, or counted again without the strings
        assert real <= json_size(data, bound) <= 3.5 * real, shape


def test_brackets_inside_strings_are_counted_again_without_them():
    data = json.dumps([json.dumps({"a": [[1, 2], {"b": [3]}]})] * N).encode()
    real = decoded(data)
    first = json_size(data, 2**62)
    assert first > 5 * real  # the first count takes the strings' brackets as lists
    assert real <= json_size(data, first - 1) <= 2 * real


def test_invalid_json_is_bounded_by_what_json_builds_before_failing():
    valid = b"[" + b",".join([b"[]"] * N) + b"]"
    with pytest.raises(json.JSONDecodeError, match="Expecting ',' delimiter"):
        json.loads(valid[:-1])
    assert json_size(valid[:-1], 0) >= decoded(valid)
    unterminated = b'["' + b'\\"[[' * N  # a string to the end: json builds none of it
    assert json_size(unterminated, 0) < json_size(unterminated, 2**62) / 10


def write(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def test_json_outputs_together_must_fit_the_memory_limit(tmp_path):
    lists = b"[" + b",".join([b"[]"] * 100_000) + b"]"  # ~6 MiB decoded, ~16 MiB counted
    folder = write(tmp_path / "out", {"a": lists, "b": lists, "text": lists * 20})
    tags = {"a": "json", "b": "json", "text": "str"}
    values = collect_outputs(folder, tags, memory="64m")
    assert len(values["a"]) == len(values["b"]) == 100_000
    assert len(values["text"]) == 20 * len(lists)  # text is not JSON: not counted
    with pytest.raises(OutputLimitExceeded) as raised:
        collect_outputs(folder, tags, memory="24m")
    message = str(raised.value)
    assert message.startswith("output 'b' would decode to ~16 MiB")
    assert "raise resources memory" in message
    assert "\n" not in message


def test_the_runners_record_of_types_is_bounded_too(tmp_path):
    record = json.dumps({"x": "int", "pad": [[]] * 300_000}).encode()
    folder = write(tmp_path / "out", {"x": b"1", INFERRED_TYPES: record})
    assert collect_outputs(folder, {"x": None}, memory="256m") == {"x": 1}
    with pytest.raises(OutputLimitExceeded, match="the auto-IO runner's record"):
        collect_outputs(folder, {"x": None}, memory="16m")
