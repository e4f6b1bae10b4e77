"""The auto-IO runner, executed inside the container (standard library only).

It reads each declared input from ``/var/inputs/<name>`` into a variable of the same name, runs
the cell as ``<cell>`` (so tracebacks show the cell's own line numbers), then writes each declared
scalar output variable to ``/var/outputs/<name>``. It is what lets a cell be pure business logic
while inputs still never travel through argv or a shell.
"""

import json
import pathlib
import sys

RUN = pathlib.Path(__file__).parent

sys.path.insert(0, str(RUN))
import jsbx_codec as codec  # type: ignore[import-not-found]  # noqa: E402  (copied here by the host)

del sys.path[0]


def main() -> None:
    manifest = json.loads((RUN / "manifest.json").read_text())
    namespace: dict[str, object] = {"__name__": "__main__"}
    for name, tag in manifest["inputs"].items():
        path = pathlib.Path("/var/inputs") / name
        namespace[name] = (
            str(path) if tag in codec.PATH_TAGS else codec.decode(tag, path.read_bytes())
        )
    code = (RUN / "main.py").read_text()
    exec(compile(code, "<cell>", "exec"), namespace)
    inferred = {}
    for name, tag in manifest["outputs"].items():
        if tag in codec.PATH_TAGS or name not in namespace:
            continue  # path outputs are written by the code; the host names missing ones
        try:
            if tag is None:
                tag = inferred[name] = codec.infer(namespace[name])
            data = codec.encode(tag, namespace[name])
        except TypeError as exc:
            sys.exit(f"output {name!r}: {exc}")
        _write(name, data)
    _write(codec.INFERRED_TYPES, json.dumps(inferred).encode())


def _write(name: str, data: bytes) -> None:
    """Write a fresh file, replacing whatever the code left under that name: a FIFO would
    block the write and a link would send it elsewhere (a folder stays, and fails loudly)."""
    path = pathlib.Path("/var/outputs") / name
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.write_bytes(data)


main()
