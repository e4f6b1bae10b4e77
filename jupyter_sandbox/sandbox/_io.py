"""Typed IO across the container boundary, as files.

Inputs are written to a host directory mounted read-only at ``/var/inputs``; the program (the
cell, the auto-IO runner and the codec) to another mounted read-only at ``/opt/jupyter-sandbox``;
outputs come back from ``/var/outputs`` (a size-limited tmpfs inside the container) as a tar
stream. Values never travel through argv, environment variables or a shell string, so no
content of an input can become a command.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib.util
import io
import json
import marshal
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from .._shared._errors import (
    ContainerError,
    InvalidOutput,
    MissingOutput,
    OutputLimitExceeded,
    SandboxConfigError,
    SandboxTimeout,
)
from .._shared._owner import temp_prefix
from .._shared._preview import preview as bounded_preview
from . import _codec, _displays
from ._spec import Mode, parse_size
from ._types import Dir, File

INPUTS = "/var/inputs"
OUTPUTS = "/var/outputs"
PROGRAM = "/opt/jupyter-sandbox"
CA_FILE = f"{PROGRAM}/ca-bundle.pem"
"""Where a run finds its sandbox's ``ca_bundle``: beside the program, in its read-only mount."""
_HERE = Path(__file__).parent
_PREVIEW = 200
_BLOCK = 1 << 16
_ZEROS = bytes(_BLOCK)
ENTRY_COST = 4096
"""Bytes each entry of ``/var/outputs`` counts against the limit besides its size (a disk
block's worth): empty files are not free to unpack (creating one took ~1-2 ms on the
development host's ext4 under load), so the default 256 MiB admits at most 65,536 entries."""
_STREAM_SLACK_BYTES = 1 << 20
_SHOWN = 120
"""Characters of an entry's name shown in an error."""
_LINK_CEILING = 4096
_HOPS_CEILING = 40
"""Links followed in one resolution, as the kernel allows."""
FOLDER_DEPTH_CEILING = 100
"""Folders an input or output may nest. Python's own tree walkers recurse once or twice per
level (``shutil.rmtree`` of a failed run's temp folder, ``copytree``, ``rglob``), so a
1,200-deep output raised a raw `RecursionError` and left its folder behind."""
_ODD = re.compile(r"[\x00-\x1f\x7f\udc80-\udcff]")
"""Control characters (terminal escapes) and undecodable bytes are refused in output names."""


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
        if tag == "file" and path.exists():  # /dev/zero said "no such file", which it is not
            raise SandboxConfigError(
                f"input {name!r}: {path} is not a regular file (a FIFO, socket, device or "
                "directory cannot be sent as a File)"
            )
        raise SandboxConfigError(f"input {name!r}: no such {what} {path}")


def stage_inputs(
    dest: Path, tags: Mapping[str, str], values: Mapping[str, Any], *, hashed: bool = False
) -> tuple[bytes, ...]:
    """Write each input to ``dest/<name>``: encoded scalars, or copies of `File`/`Dir` paths.
    With ``hashed``, return what the result cache keys them by (`_cache.cache_key`): each
    staged path relative to ``dest`` and its content's digest, in the tree's sorted order:
    a scalar's and a `File`'s taken as they are written (a file is read once), a `Dir`'s read
    back from its copy; without, nothing.

    Copies (not bind mounts of the originals) so the non-root user can read them whatever
    their host permissions, and so the code can never reach the host file itself. Staging
    writes only inside ``dest`` and reads only inside each input: modes are set on the copies
    (never through a link), and a `Dir`'s links are kept only when they point inside it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    os.chmod(dest, 0o755)
    chunks: dict[str, tuple[bytes, ...]] = {}
    with _host_space("staging inputs"):
        for name, tag in tags.items():
            value = values[name]
            check_input(name, tag, value)
            target = dest / name
            digest = hashlib.sha256() if hashed else None
            if tag == "file":
                _copy_file(os.fspath(value), target, label=repr(name), digest=digest)
            elif tag == "dir":
                _copy_dir(name, Path(os.fspath(value)).resolve(), target)
            else:
                data = _codec.encode(tag, value)
                _write_new(target, data)
                if digest is not None:
                    digest.update(data)
            if digest is None:
                continue
            if tag == "dir":  # a folder's entries, one by one, as its copy holds them
                chunks[name] = (name.encode() + b"\0", *_tree_digests(dest, target))
            else:
                chunks[name] = (name.encode() + b"\0", digest.digest())
    return tuple(chunk for name in sorted(chunks) for chunk in chunks[name])


def _tree_digests(root: Path, top: Path) -> tuple[bytes, ...]:
    """What the cache key takes of the tree under ``top``: each path relative to ``root``,
    then the digest of a file's content, in sorted order."""
    chunks: list[bytes] = []
    for path in sorted(top.rglob("*")):
        chunks.append(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file():
            chunks.append(hashlib.sha256(path.read_bytes()).digest())
    return tuple(chunks)


@contextlib.contextmanager
def _host_space(what: str) -> Iterator[None]:
    """A full host disk while moving files is the host's problem, said in one line."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise ContainerError(
            f"the host ran out of disk space while {what} in {tempfile.gettempdir()}: "
            "free space there, or point TMPDIR at a roomier folder"
        ) from None


def _create(path: Path, mode: int) -> int:
    """A new file opened for writing; never an existing one and never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, mode)
    return fd


def _write_new(path: Path, data: bytes) -> None:
    fd = _create(path, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _copy_sparse(source: IO[bytes], fd: int, digest: Any = None) -> int:
    """Copy ``source`` into the new file ``fd``, leaving holes for blocks of zeros, and feed
    ``digest`` (a hashlib object) what it read.

    A sparse file (``truncate -s 200M``) then costs its data, not its apparent size, on the
    host disk. Returns the bytes copied.
    """
    size = 0
    while block := source.read(_BLOCK):
        size += len(block)
        if digest is not None:
            digest.update(block)
        if block == _ZEROS[: len(block)]:
            os.lseek(fd, len(block), os.SEEK_CUR)
        else:
            os.write(fd, block)  # regular file: os.write writes everything
    os.ftruncate(fd, size)
    return size


def _copy_file(
    source: str | Path, target: Path, *, label: str, dir_fd: int | None = None, digest: Any = None
) -> None:
    """Copy one regular file; refuse anything else (a FIFO would block, a device is not data).

    With ``dir_fd`` (inside a `Dir`), ``source`` is a name in that folder, opened without
    following a link: one swapped in since the folder was listed is refused, not followed.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(source, flags) if dir_fd is None else _open_in(dir_fd, source, flags, label)
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxConfigError(f"input {label} is not a regular file")
        out = _create(target, 0o644)
        try:
            _copy_sparse(src, out, digest)
        finally:
            os.close(out)


def _open_in(dir_fd: int, name: str | Path, flags: int, label: str) -> int:
    """Open ``name`` in the folder ``dir_fd`` without following a link."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since it was listed
            raise SandboxConfigError(f"input {label} changed while it was copied") from None
        raise


def _copy_dir(name: str, root: Path, dest: Path) -> None:
    """Copy a directory input: files and folders, and links that stay inside it (kept as
    relative links). A link out of it, or a FIFO, socket or device, is refused by name.

    Each folder is opened from its parent's descriptor without following links, so a folder
    swapped for a link while the copy runs is refused instead of copied from elsewhere.

    Depth first, one open folder per level (at most `FOLDER_DEPTH_CEILING`): opening every
    subfolder of a listing at once ran out of descriptors (``EMFILE``, a raw `OSError`) on a
    folder of 600 subfolders under a 512-descriptor limit.
    """
    dirs = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    os.mkdir(dest)
    os.chmod(dest, 0o755)
    stack: list[tuple[int, Iterator[os.DirEntry[str]], Path, Path]] = []

    def enter(fd: int, source_dir: Path, dest_dir: Path) -> None:
        try:
            with os.scandir(fd) as listing:
                entries = list(listing)
        except BaseException:
            os.close(fd)
            raise
        stack.append((fd, iter(entries), source_dir, dest_dir))

    try:
        enter(os.open(root, dirs | os.O_NOFOLLOW), root, dest)
        while stack:
            fd, entries, source_dir, dest_dir = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            source, target = source_dir / entry.name, dest_dir / entry.name
            label = repr(f"{name}/{source.relative_to(root)}")
            if entry.is_symlink():
                _copy_link(name, root, source, target, label)
            elif entry.is_dir(follow_symlinks=False):
                if len(stack) > FOLDER_DEPTH_CEILING:
                    raise SandboxConfigError(
                        f"input {name!r}: {label[:_SHOWN]} is nested more than "
                        f"{FOLDER_DEPTH_CEILING} folders deep"
                    )
                os.mkdir(target)
                os.chmod(target, 0o755)
                enter(_open_in(fd, entry.name, dirs, label), source, target)
            elif entry.is_file(follow_symlinks=False):
                _copy_file(entry.name, target, label=label, dir_fd=fd)
            else:
                raise SandboxConfigError(
                    f"input {name!r}: {label} is not a file, directory or link "
                    "(a FIFO, socket or device cannot be sent)"
                )
    except BaseException:
        for fd, *_rest in stack:
            os.close(fd)
        raise


def _copy_link(name: str, root: Path, source: Path, target: Path, label: str) -> None:
    """Keep a link that leads inside the input, as a relative link between real folders (so
    it means the same inside the container); refuse one that leads out."""
    real = Path(os.path.realpath(source))
    if real != root and root not in real.parents:
        raise SandboxConfigError(
            f"input {name!r}: {label} is a link to {os.readlink(source)!r}, outside the "
            "directory; copy what it points to into the directory"
        )
    os.symlink(os.path.relpath(real, source.parent), target)


def stage_program(
    dest: Path,
    *,
    mode: Mode,
    code: str | None,
    inputs: Mapping[str, str],
    outputs: Mapping[str, str | None],
    ca_bundle: bytes | None = None,
) -> None:
    """Write what the container runs: the cell, plus the runner and codec in auto-IO mode, and
    the CA bundle its HTTPS trusts (`CA_FILE`) when it has one: a copy, so a host file only
    its owner may read is still readable by the container's own uid."""
    with _host_space("staging the program"):
        dest.mkdir(parents=True, exist_ok=True)
        if ca_bundle is not None:
            (dest / Path(CA_FILE).name).write_bytes(ca_bundle)
        if code is not None:
            (dest / "main.py").write_text(code)
        if mode == "auto":
            shutil.copyfile(_HERE / "_auto_io.py", dest / "runner.py")
            (dest / "__pycache__").mkdir(exist_ok=True)
            for source, module in _RUNNER_MODULES:
                shutil.copyfile(_HERE / source, dest / f"{module}.py")
                pyc = dest / "__pycache__" / f"{module}.{sys.implementation.cache_tag}.pyc"
                pyc.write_bytes(_bytecode(source, module))
            lines = [f"in\t{name}\t{tag}\n" for name, tag in inputs.items()]
            lines += [f"out\t{name}\t{tag or ''}\n" for name, tag in outputs.items()]
            (dest / "manifest.tsv").write_text("".join(lines))
        _readable(dest)


_RUNNER_MODULES = (("_codec.py", "jsbx_codec"), ("_display_shim.py", "jsbx_display"))
"""What the auto-IO runner imports from beside it: this package's file, its name there."""


@functools.cache
def _bytecode(source_name: str, module: str) -> bytes:
    """A module the runner imports, compiled once per kernel, so the runner does not compile
    it from source at every start (~5 ms for the codec in a container under load; the root is
    read-only and nothing writes bytecode there). An unchecked hash-based pyc (PEP 552): no
    timestamp to match after the copy. Only an interpreter of the host's cache tag
    (``cpython-311``) looks for it, and one whose magic number differs falls back to the
    source."""
    source = (_HERE / source_name).read_bytes()
    code = compile(source, f"{PROGRAM}/{module}.py", "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, source not checked
    return (
        importlib.util.MAGIC_NUMBER
        + flags
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def program_command(mode: Mode) -> list[str]:
    """argv of the Python modes (command mode brings its own)."""
    script = "runner.py" if mode == "auto" else "main.py"
    return ["python3", f"{PROGRAM}/{script}"]


def output_entries(mode: Mode, tags: Mapping[str, str | None]) -> tuple[str, ...]:
    """What collection takes from ``/var/outputs``: the declared outputs, plus (auto-IO only:
    no other mode writes them) the runner's record of the types it inferred and the cell's
    displays (`_displays`; tar runs only when one of these exists)."""
    if mode != "auto":
        return tuple(tags)
    return (*tags, _codec.INFERRED_TYPES, _displays.FOLDER)


def extract_outputs(
    chunks: Iterable[bytes],
    dest: Path,
    names: Collection[str],
    *,
    limit: int,
    deadline: float,
    end: bytes = b"",
) -> None:
    """Unpack the tar stream of ``/var/outputs`` into the new folder ``dest``, as hostile data.

    The stream comes from the image's ``tar`` while code of the run may still be changing
    ``/var/outputs``, so nothing in it is trusted: only entries under ``names`` are written,
    only as regular files, folders and links that stay inside their own output; a hard link
    becomes a copy of a file already written in the same output. Anything else under a
    declared name (a FIFO, a device, ``..``, a link out, a control character in a name) is
    `InvalidOutput` naming the entry. Files are created new and never through a link (links
    are made last, after checking where each one leads once all exist).

    Every entry costs its apparent size plus `ENTRY_COST` against ``limit`` (the run's disk
    size, which bounds ``/var/outputs``): past it, `OutputLimitExceeded` before its data is
    read. Past ``deadline`` (the run's wall-clock limit), `SandboxTimeout`.

    With ``end`` (the run's script, `_container`), the tar is followed by ``end`` and one line of
    tar's own verdict: its exit status and first message. tar leaves out what it cannot read
    (a folder the code made unreadable, ``chmod 000``) and says so only there, so a status
    other than 0, or a stream that stops before the line, is a `ContainerError` quoting tar's
    message (which names the entry): a `Dir` is whole or the run fails.
    """
    dest.mkdir(mode=0o700)
    reader = _Chunks(chunks, limit=limit, deadline=deadline, end=end)
    tree = _Tree(dest, names)
    spent = 0
    with _host_space("collecting outputs"):
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                for member in tar:
                    _check_deadline(deadline)
                    if member.size < 0:
                        raise tarfile.HeaderError(f"negative size for {member.name!r}")
                    spent += ENTRY_COST + member.size
                    if spent > limit:
                        raise _too_big(limit)
                    tree.take(member, tar)
        except (tarfile.TarError, EOFError) as exc:
            if reader.data:  # else tar wrote nothing (no output exists): nothing to unpack
                raise ContainerError(
                    f"could not read {OUTPUTS}: its tar stream is broken ({exc})"
                ) from None
        if end:
            _check_verdict(reader.verdict())
        tree.make_links(deadline)


_VERDICT_MAX = 4096
"""Bytes of tar's verdict line read (`extract_outputs`); what is past them is not shown."""


def _check_verdict(line: bytes | None) -> None:
    """`ContainerError` unless the line after the tar says tar read everything (status 0)."""
    if line is None:
        raise ContainerError(
            f"the tar of {OUTPUTS} stopped before it finished (tar or the container was "
            "killed): no output was kept; run it again"
        )
    status, _, message = line.partition(b" ")
    if status == b"0":
        return
    said = _ODD.sub("?", message.decode(errors="replace")).strip() or "(no message)"
    said = said if len(said) <= _SHOWN else said[: _SHOWN - 3] + "..."
    raise ContainerError(
        f"{OUTPUTS} could not be read whole (tar exited with status "
        f"{status.decode(errors='replace')[:8]}: {said}): no output was kept; make every file "
        "and folder under the outputs readable"
    )


def _too_big(limit: int) -> OutputLimitExceeded:
    return OutputLimitExceeded(
        f"{OUTPUTS} holds more than the disk limit ({limit / 2**20:g} MiB, each entry counted "
        f"as {ENTRY_COST} bytes plus its apparent size): write less, or raise resources disk"
    )


def _check_deadline(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise SandboxTimeout(f"collecting {OUTPUTS} ran past the run's timeout")


class _Chunks(io.RawIOBase):
    """The run's stream's byte chunks as a file for `tarfile`, bounded in size and time.

    With ``end``, the file ends where ``end`` first comes (`overlap` holds back a chunk's
    tail that may begin it); what follows is the verdict line (`verdict`).
    """

    def __init__(
        self, chunks: Iterable[bytes], *, limit: int, deadline: float, end: bytes = b""
    ) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._left = memoryview(b"")
        self._limit = limit
        self._deadline = deadline
        self._end = end
        self._held = b""
        self._after: bytes | None = None
        """What came after ``end``, once it came."""
        self.size = 0
        self.data = 0
        """Bytes handed to the reader (the tar's, without ``end`` and its line)."""

    def readable(self) -> bool:
        return True

    def _next(self) -> bytes | None:
        """The stream's next chunk (None at its end), counted against the bounds."""
        _check_deadline(self._deadline)
        chunk = next(self._chunks, None)
        if chunk is not None:
            self.size += len(chunk)
            if self.size > 2 * self._limit + _STREAM_SLACK_BYTES:  # headers past any honest tar
                raise _too_big(self._limit)
        return chunk

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            chunk = None if self._after is not None else self._next()
            if chunk is None:  # the end: what was held back is the tar's after all
                self._left, self._held = memoryview(self._held), b""
                if not self._left:
                    return 0
                break
            data, self._held = self._held + chunk, b""
            at = data.find(self._end) if self._end else -1
            if at >= 0:
                data, self._after = data[:at], data[at + len(self._end) :]
            elif self._end:
                keep = overlap(data, self._end)
                data, self._held = data[: len(data) - keep], data[len(data) - keep :]
            self._left = memoryview(data)
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        self.data += n
        return n

    def verdict(self) -> bytes | None:
        """The line after ``end`` (at most `_VERDICT_MAX` bytes), read on to it past what is
        left of the tar (its padding); None if the stream ended before the whole line."""
        while self.read(_BLOCK):
            pass
        if self._after is None:
            return None
        line = self._after
        while b"\n" not in line and len(line) <= _VERDICT_MAX:
            chunk = self._next()
            if chunk is None:
                return None
            line += chunk
        head, newline, _ = line.partition(b"\n")
        return head[:_VERDICT_MAX] if newline or len(line) > _VERDICT_MAX else None


def overlap(data: bytes, marker: bytes) -> int:
    """Length of the longest end of ``data`` that begins ``marker`` (held back for now)."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if data.endswith(marker[:size]):
            return size
    return 0


class _Tree:
    """The outputs being unpacked: what was written where, and the links still to make."""

    def __init__(self, root: Path, names: Collection[str]) -> None:
        self.root = root
        self.names = set(names)
        self.files: dict[tuple[str, ...], Path] = {}
        self.links: dict[tuple[str, ...], str] = {}

    def take(self, member: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        parts = tuple(p for p in member.name.split("/") if p not in ("", "."))
        if not parts or parts[0] not in self.names or member.name.startswith("/"):
            return  # not a declared output: skipped, never written (its size was counted)
        entry = f"{OUTPUTS}/{'/'.join(parts)}"
        shown = repr(entry if len(entry) <= _SHOWN else entry[: _SHOWN - 3] + "...")

        def invalid(why: str) -> InvalidOutput:
            return InvalidOutput(f"output {parts[0]!r}: {shown} {why}", name=parts[0])

        if any(p == ".." or _ODD.search(p) for p in parts):
            raise invalid("has a '..', control character or undecodable byte in its name")
        if len(parts) > FOLDER_DEPTH_CEILING + 1:
            raise invalid(f"is nested more than {FOLDER_DEPTH_CEILING} folders deep")
        if any(parts[:i] in self.links for i in range(1, len(parts))):
            raise invalid("lies under a link (the link would lead elsewhere)")
        path = self.root.joinpath(*parts)
        try:
            if member.isdir():
                self._dirs(parts)
            elif member.isreg():
                self._dirs(parts[:-1])
                self._file(path, parts, tar.extractfile(member), member.mode)
            elif member.issym():
                if len(parts) == 1:
                    raise invalid("is a link: an output must be a file or a directory")
                if parts in self.links or len(member.linkname) > _LINK_CEILING:
                    raise invalid("is a link given twice, or with an overlong target")
                self.links[parts] = member.linkname
            elif member.islnk():
                target = tuple(p for p in member.linkname.split("/") if p not in ("", "."))
                if target not in self.files or target[0] != parts[0]:
                    raise invalid(f"is a hard link to {member.linkname[:_SHOWN]!r}, outside it")
                self._dirs(parts[:-1])
                with self.files[target].open("rb") as source:
                    self._file(path, parts, source, member.mode)
            else:
                raise invalid("is not a regular file, directory or link (FIFO or device)")
        except FileExistsError:
            raise invalid("appears twice") from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise invalid(f"cannot be written on the host ({exc.strerror})") from None

    def _dirs(self, parts: tuple[str, ...]) -> None:
        """Make each folder of ``parts``; an existing one must be a real folder we made."""
        path = self.root
        for part in parts:
            path = path / part
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory") from None

    def _file(self, path: Path, parts: tuple[str, ...], data: IO[bytes] | None, mode: int) -> None:
        fd = _create(path, 0o755 if mode & 0o100 else 0o644)
        try:
            _copy_sparse(data or io.BytesIO(), fd)
        finally:
            os.close(fd)
        self.files[parts] = path

    def make_links(self, deadline: float) -> None:
        """Make the links, each only if following it (and every link on its way) stays
        inside its own output: checked on the whole set, since ``x -> .`` and
        ``g -> x/x/../../..`` each look harmless alone."""
        for parts, target in self.links.items():
            _check_deadline(deadline)
            if not _stays_inside(self.links, parts, target):
                shown = repr(f"{OUTPUTS}/{'/'.join(parts)}"[:_SHOWN])
                raise InvalidOutput(
                    f"output {parts[0]!r}: {shown} is a link to {target[:_SHOWN]!r}, which "
                    "leads out of the output",
                    name=parts[0],
                )
        for parts, target in self.links.items():
            self._dirs(parts[:-1])
            try:
                os.symlink(target, self.root.joinpath(*parts))
            except FileExistsError:
                raise InvalidOutput(
                    f"output {parts[0]!r}: {'/'.join(parts)[:_SHOWN]!r} appears twice",
                    name=parts[0],
                ) from None


def _stays_inside(links: Mapping[tuple[str, ...], str], link: tuple[str, ...], target: str) -> bool:
    """Whether resolving ``link`` the way the kernel would never leaves its output's folder
    (so the output can move, and a relative link keeps meaning the same file)."""
    path = list(link[:-1])
    todo = [target]
    hops = 0
    while todo:
        text = todo.pop()
        if text.startswith("/"):
            return False
        parts = [p for p in text.split("/") if p not in ("", ".")]
        for i, part in enumerate(parts):
            if part == "..":
                if len(path) <= 1:
                    return False
                path.pop()
                continue
            path.append(part)
            onward = links.get(tuple(path))
            if onward is not None:
                hops += 1
                if hops > _HOPS_CEILING:
                    return False
                path.pop()
                todo.append("/".join(parts[i + 1 :]))
                todo.append(onward)
                break
    return True


def collect_outputs(
    folder: Path | None, tags: Mapping[str, str | None], *, memory: str | int
) -> dict[str, Any]:
    """Decode declared outputs from the folder `extract_outputs` filled, in declaration order.

    `File`/`Dir` outputs move to a fresh host directory that outlives the run (the caller owns
    it). A missing output raises `MissingOutput` naming it; one that does not parse, or is a
    folder where a file was declared (or the reverse), `InvalidOutput`. An output declared
    without a type takes the type the auto-IO runner recorded (never a path), or ``str`` in
    the other modes (where no record is collected).

    JSON decodes to many times its size (``[[],[],...]``: ~21x), so before decoding, the
    JSON outputs together (and the runner's record) must fit the run's ``memory`` limit as
    `_codec.json_size` bounds their objects, else `OutputLimitExceeded`: the kernel holds no
    more of a run's values than the run itself could (the limit is below the host's memory).
    """
    if not tags:
        return {}
    root = folder if folder is not None and folder.is_dir() else None
    budget = _Budget(parse_size(memory))
    inferred = _inferred(root, tags, budget) if root is not None else {}
    values: dict[str, Any] = {}
    paths: dict[str, type[File | Dir]] = {}
    for name, declared in tags.items():
        tag = declared or inferred.get(name, "str")
        try:
            kind = os.lstat(root / name).st_mode if root is not None else None
        except FileNotFoundError:
            kind = None
        if kind is None:
            raise MissingOutput(
                f"declared output {name!r} was not written to {OUTPUTS}/{name}", name=name
            )
        want_dir = tag == "dir"
        if stat.S_ISDIR(kind) != want_dir:
            what = "a directory" if want_dir else "a file"
            raise InvalidOutput(f"output {name!r}: {OUTPUTS}/{name} is not {what}", name=name)
        assert root is not None  # kind is set only when it is
        if tag in _codec.PATH_TAGS:
            values[name] = paths[name] = File if tag == "file" else Dir  # moved once all parse
            continue
        data = (root / name).read_bytes()
        if tag == "json":
            budget.spend(data, f"output {name!r}")
        try:
            values[name] = _codec.decode(tag, data)
        except ValueError as exc:
            raise InvalidOutput(f"output {name!r} is not a valid {tag}: {exc}", name=name) from None
    if paths:  # only now: a failure above must not leave a kept folder behind
        assert root is not None
        kept = Path(tempfile.mkdtemp(prefix=temp_prefix("out")))
        for name, kind_of in paths.items():
            values[name] = kind_of(shutil.move(root / name, kept / name))
    return values


class _Budget:
    """What JSON outputs may still decode to, in bytes of Python objects."""

    def __init__(self, memory: int) -> None:
        self.memory = self.left = memory

    def spend(self, data: bytes, what: str) -> None:
        size = _codec.json_size(data, self.left)
        if size > self.left:
            raise OutputLimitExceeded(
                f"{what} would decode to ~{size / 2**20:,.0f} MiB of objects, past what the "
                f"run's memory limit leaves for its outputs ({self.left / 2**20:,.0f} of "
                f"{self.memory / 2**20:,.0f} MiB): return less (or a File), or raise "
                "resources memory"
            )
        self.left -= size


def _inferred(root: Path, tags: Mapping[str, str | None], budget: _Budget) -> dict[str, str]:
    """The auto-IO runner's record of inferred tags, checked: the code ran in the same
    process as the runner, so the record is as untrusted as any output."""
    untyped = [name for name, tag in tags.items() if tag is None]
    path = root / _codec.INFERRED_TYPES
    if not untyped or not path.is_file():
        return {}
    data = path.read_bytes()
    budget.spend(data, f"the auto-IO runner's record {_codec.INFERRED_TYPES}")
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        record = None
    for name in untyped:
        if not isinstance(record, dict) or record.get(name, "str") not in _codec.INFERABLE:
            raise InvalidOutput(
                f"output {name!r}: the auto-IO runner's record of its type "
                f"({_codec.INFERRED_TYPES}) is not valid",
                name=name,
            )
    return {name: record[name] for name in untyped if name in record}


def preview(value: Any) -> str:
    """A short, JSON-safe description of a value for records and views."""
    if isinstance(value, File | Dir):
        return str(value.path)
    if isinstance(value, bytes | bytearray):
        text = f"<{len(value)} bytes> {bytes(value[:_PREVIEW])!r}"
        return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"
    return bounded_preview(value, _PREVIEW)  # bounded repr that survives a broken __repr__
