"""The auto-IO runner, executed inside the container (standard library only).

It reads each declared input from ``/var/inputs/<name>`` into a variable of the same name, runs
the cell as ``<cell>`` (so tracebacks show the cell's own line numbers), then writes each declared
scalar output variable to ``/var/outputs/<name>``. It is what lets a cell be pure business logic
while inputs still never travel through argv or a shell.

Its start is part of every run, so it imports only what a clean run needs (``os.path``, not
``pathlib``; ``traceback`` once the cell failed): the two cost ~40 ms of a ~180 ms start under
load here. For the same reason the manifest is lines of text, not JSON: ``json`` brings ``re``
and ``enum`` (~13 ms), so it is imported only when an output's type had to be inferred.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

RUN = os.path.dirname(os.path.abspath(__file__))
INPUTS = "/var/inputs"
OUTPUTS = "/var/outputs"

sys.path.insert(0, RUN)
import jsbx_codec as codec  # type: ignore[import-not-found]  # noqa: E402  (copied here by the host)
import jsbx_display as rich  # type: ignore[import-not-found]  # noqa: E402  (display(), figures)

del sys.path[0]


def main() -> None:
    manifest = _manifest()
    namespace: dict[str, object] = {"__name__": "__main__"}
    for name, tag in manifest["in"].items():
        path = os.path.join(INPUTS, name)
        namespace[name] = path if tag in codec.PATH_TAGS else codec.decode(tag, _read(path))
    code = _read(os.path.join(RUN, "main.py")).decode()
    _CellSource.code = code
    sys.meta_path.insert(0, _CellSource)
    rich.install()  # what a notebook cell shows (`_display_shim`): display(), figures
    try:
        # As `exec`, plus the last expression's value displayed; compiled with dont_inherit:
        # this file's `from __future__ import annotations` is not the cell's.
        rich.run(code, CELL, namespace)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        _report(exc)
        sys.exit(1)
    inferred = {}
    for name, tag in manifest["out"].items():
        if tag in codec.PATH_TAGS or name not in namespace:
            continue  # path outputs are written by the code; the host names missing ones
        try:
            if tag is None:
                tag = inferred[name] = codec.infer(namespace[name])
            data = codec.encode(tag, namespace[name])
        except TypeError as exc:
            sys.exit(f"output {name!r}: {exc}")
        _write(name, data)
    if inferred:
        _write(codec.INFERRED_TYPES, _json(inferred))
    else:  # none needed: with no output declared, nothing is left to collect and no tar runs
        _clear(os.path.join(OUTPUTS, codec.INFERRED_TYPES))


class _CellSource:
    """Puts the cell's source into ``linecache`` when something first imports it (traceback,
    warnings, inspect do), so a traceback or a warning shows the cell's line, not just its
    number. Importing it up front would cost every run ~10-15 ms (``tokenize`` brings ``re``
    and ``enum``) that a clean run never needs."""

    code = ""

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "linecache":
            return None
        sys.meta_path.remove(cls)
        for finder in sys.meta_path:
            spec: Any = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_register(module: Any) -> None:
            exec_module(module)
            lines = cls.code.splitlines(keepends=True)
            module.cache[CELL] = (len(cls.code), None, lines, CELL)

        spec.loader.exec_module = exec_and_register
        return spec


def _manifest() -> dict[str, dict[str, str | None]]:
    """The declared inputs and outputs by direction: ``in``/``out``, name, tag (empty for an
    output whose type is inferred), one per line, tab-separated (names are identifiers)."""
    manifest: dict[str, dict[str, str | None]] = {"in": {}, "out": {}}
    for line in _read(os.path.join(RUN, MANIFEST)).decode().splitlines():
        direction, name, tag = line.split("\t")
        manifest[direction][name] = tag or None
    return manifest


def _json(value: object) -> bytes:
    import json

    return json.dumps(value).encode()


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _write(name: str, data: bytes) -> None:
    """Write a fresh file, replacing whatever the code left under that name."""
    path = os.path.join(OUTPUTS, name)
    _clear(path)
    with open(path, "wb") as file:
        file.write(data)


def _clear(path: str) -> None:
    """Remove what the code left at ``path``: a FIFO would block a write and a link would send
    it elsewhere (a folder stays, and fails loudly)."""
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
        os.unlink(path)


def _report(exc: BaseException) -> None:
    """The cell's traceback as Python would print it, minus this runner's frames: they are
    ours, not the user's. A network failure in a sandbox without network is shown from the
    cell's own lines only (the library frames under it run to 40 lines and say nothing the
    last line does not)."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL:
        tb = tb.tb_next
    if _offline(exc):
        frames = [f for f in traceback.extract_tb(tb) if f.filename == CELL]
        print("Traceback (most recent call last):", file=sys.stderr)
        print("".join(traceback.format_list(frames)), end="", file=sys.stderr)
        print("".join(traceback.format_exception_only(type(exc), exc)), end="", file=sys.stderr)
        return
    traceback.print_exception(type(exc), exc, tb)


def _offline(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a failure to reach the network."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and NETWORK_ERRNOS & {current.errno, *current.args[:1]}:
            return True
        current = current.__cause__ or current.__context__
    return False


CELL = "<cell>"
MANIFEST = "manifest.tsv"
NETWORK_ERRNOS = {-2, -3, -5, 101, 111, 113}
"""socket.gaierror's EAI_NONAME/EAI_AGAIN/EAI_NODATA, ENETUNREACH, ECONNREFUSED, EHOSTUNREACH."""

main()
