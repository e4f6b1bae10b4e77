"""Typed IO across the container boundary, as files.

Inputs are written to a host directory mounted read-only at ``/var/inputs``; the program (the
cell, the auto-IO runner and the codec) to another mounted read-only at ``/opt/jupyter-sandbox``;
outputs come back from ``/var/outputs`` (a size-limited tmpfs inside the container) as a tar
stream. Values never travel through argv, environment variables or a shell string, so no
content of an input can become a command.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import InvalidOutput, MissingOutput, SandboxConfigError
from .._preview import preview as bounded_preview
from . import _codec
from ._spec import Mode
from ._types import Dir, File

INPUTS = "/var/inputs"
OUTPUTS = "/var/outputs"
PROGRAM = "/opt/jupyter-sandbox"
_HERE = Path(__file__).parent
_PREVIEW = 200


def _readable(path: Path) -> None:
    """Let the container's non-root user read what the host (often root) wrote."""
    for root, dirs, files in os.walk(path):
        os.chmod(root, 0o755)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def check_input(name: str, tag: str, value: Any) -> None:
    """`SandboxConfigError` unless ``value`` can be sent as ``tag`` (paths must exist)."""
    if tag not in _codec.PATH_TAGS:
        try:
            _codec.check(tag, value)
        except TypeError as exc:
            raise SandboxConfigError(f"input {name!r}: {exc}") from None
        return
    kind = File if tag == "file" else Dir
    if not isinstance(value, kind | str | os.PathLike):
        raise SandboxConfigError(f"input {name!r}: expected {tag}, got {value!r}")
    path = Path(os.fspath(value))
    if not (path.is_file() if tag == "file" else path.is_dir()):
        what = "file" if tag == "file" else "directory"
        raise SandboxConfigError(f"input {name!r}: no such {what} {path}")


def stage_inputs(dest: Path, tags: Mapping[str, str], values: Mapping[str, Any]) -> None:
    """Write each input to ``dest/<name>``: encoded scalars, or copies of `File`/`Dir` paths.

    Copies (not bind mounts of the originals) so the non-root user can read them whatever
    their host permissions, and so the code can never reach the host file itself.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name, tag in tags.items():
        value = values[name]
        check_input(name, tag, value)
        target = dest / name
        if tag == "file":
            shutil.copyfile(os.fspath(value), target)
        elif tag == "dir":
            shutil.copytree(os.fspath(value), target, symlinks=True)
        else:
            target.write_bytes(_codec.encode(tag, value))
    _readable(dest)


def stage_program(
    dest: Path,
    *,
    mode: Mode,
    code: str | None,
    inputs: Mapping[str, str],
    outputs: Mapping[str, str | None],
) -> None:
    """Write what the container runs: the cell, plus the runner and codec in auto-IO mode."""
    dest.mkdir(parents=True, exist_ok=True)
    if code is not None:
        (dest / "main.py").write_text(code)
    if mode == "auto":
        shutil.copyfile(_HERE / "_runner.py", dest / "runner.py")
        shutil.copyfile(_HERE / "_codec.py", dest / "jsbx_codec.py")
        manifest = {"inputs": dict(inputs), "outputs": dict(outputs)}
        (dest / "manifest.json").write_text(json.dumps(manifest))
    _readable(dest)


def program_command(mode: Mode) -> list[str]:
    """argv of the Python modes (command mode brings its own)."""
    script = "runner.py" if mode == "auto" else "main.py"
    return ["python3", f"{PROGRAM}/{script}"]


def collect_outputs(archive: Path | None, tags: Mapping[str, str | None]) -> dict[str, Any]:
    """Decode declared outputs from the tar of ``/var/outputs``, in declaration order.

    `File`/`Dir` outputs move to a fresh host directory that outlives the run (the caller owns
    it). A missing output raises `MissingOutput` naming it; one that does not parse,
    `InvalidOutput`. An output declared without a type takes the type the auto-IO runner saw,
    or ``str`` in the other modes.
    """
    if not tags:
        return {}
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-collect-") as tmp:
        root = Path(tmp)
        if archive is not None and archive.stat().st_size:
            with tarfile.open(archive) as tar:
                tar.extractall(root, filter="data")
        inferred_file = root / _codec.INFERRED_TYPES
        inferred = json.loads(inferred_file.read_text()) if inferred_file.is_file() else {}
        values: dict[str, Any] = {}
        kept: Path | None = None
        for name, declared in tags.items():
            tag = declared or inferred.get(name, "str")
            path = root / name
            exists = path.is_dir() if tag == "dir" else path.is_file()
            if not exists:
                raise MissingOutput(
                    f"declared output {name!r} was not written to {OUTPUTS}/{name}", name=name
                )
            if tag in _codec.PATH_TAGS:
                kept = kept or Path(tempfile.mkdtemp(prefix="jupyter-sandbox-out-"))
                values[name] = (File if tag == "file" else Dir)(shutil.move(path, kept / name))
                continue
            try:
                values[name] = _codec.decode(tag, path.read_bytes())
            except ValueError as exc:
                raise InvalidOutput(
                    f"output {name!r} is not a valid {tag}: {exc}", name=name
                ) from None
    return values


def preview(value: Any) -> str:
    """A short, JSON-safe description of a value for records and views."""
    if isinstance(value, File | Dir):
        return str(value.path)
    if isinstance(value, bytes | bytearray):
        text = f"<{len(value)} bytes> {bytes(value[:_PREVIEW])!r}"
        return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"
    return bounded_preview(value, _PREVIEW)  # bounded repr that survives a broken __repr__
