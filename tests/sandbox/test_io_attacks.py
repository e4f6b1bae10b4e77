"""Container outputs and inputs never touch the host outside their own folder.

Each test is an attack run against the real Docker engine: the code in the container leaves
links, hard links, FIFOs, odd names, sparse files or floods of entries in ``/var/outputs``,
stops the ``tar`` that collects them, or writes garbage where a typed value belongs; or the
host hands in a `Dir` holding links out. The canary is a host file only root may read (0600),
as ``/etc/shadow`` is. Every test runs with a private temp folder so it can check that a
failure leaves no ``jupyter-sandbox-*`` folder behind.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox import (
    ContainerError,
    Dir,
    File,
    InvalidOutput,
    MissingOutput,
    OutputLimitExceeded,
    SandboxConfigError,
    SandboxTimeout,
    create,
)
from jupyter_sandbox.sandbox import Sandbox
from jupyter_sandbox.sandbox._io import extract_outputs
from jupyter_sandbox.sandbox._pool import settle

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

SECRET = "root-only-canary-7f3a"
MODES = ["auto", "verbatim", "command"]


@pytest.fixture
def host_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private temp folder for every folder the engine makes on the host (run, out...)."""
    private = tmp_path / "host-tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield private
    settle()  # background removals done: whatever is left now was left for good


def left_behind(host_tmp: Path) -> list[str]:
    settle()
    return sorted(p.name for p in host_tmp.iterdir())


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A host file like /etc/shadow: root-only, with content no sandbox may ever see."""
    path = tmp_path / "private" / "shadow"
    path.parent.mkdir(mode=0o700)
    path.write_text(SECRET)
    os.chmod(path, 0o600)
    return path


def writes(mode: str, script: str, outputs: dict[str, object], **kwargs: Any) -> Sandbox:
    """A sandbox whose code runs ``script`` (Python, no inputs) in the given mode."""
    if mode == "command":
        return create("attack", command=["python3", "-c", script], outputs=outputs, **kwargs)
    return create("attack", code=script, outputs=outputs, auto_io=mode == "auto", **kwargs)


def assert_one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text and "Traceback" not in text
    return text


def chain_to(target: Path, depth: int = 12) -> str:
    """``x/x/.../../../../<target>``: harmless-looking once ``x -> .`` exists, and out."""
    return "x/" * depth + "../" * (depth + 30) + str(target).lstrip("/")


# 1. Links in outputs ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_link_chain_out_of_outputs_is_refused_in_every_mode(mode, canary, host_tmp, isolation):
    script = (
        "import os\n"
        "os.symlink('.', '/var/outputs/x')\n"
        f"os.symlink({chain_to(canary)!r}, '/var/outputs/g')\n"
    )
    with pytest.raises(InvalidOutput, match=r"output 'g': '/var/outputs/g' is a link") as info:
        writes(mode, script, {"g": File}).run()
    assert info.value.name == "g"
    assert_one_line(info.value)
    assert SECRET not in str(info.value.record)
    assert left_behind(host_tmp) == []


def test_link_chain_inside_a_declared_dir_is_refused_naming_the_entry(canary, host_tmp, isolation):
    script = (
        "import os\n"
        "os.makedirs('/var/outputs/d/sub')\n"
        "open('/var/outputs/d/ok.txt', 'w').write('fine')\n"
        "os.symlink('.', '/var/outputs/d/x')\n"
        f"os.symlink({chain_to(canary)!r}, '/var/outputs/d/sub/g')\n"
    )
    with pytest.raises(InvalidOutput, match=r"'/var/outputs/d/sub/g' is a link to .* leads out"):
        writes("verbatim", script, {"d": Dir}).run()
    assert left_behind(host_tmp) == []


@pytest.mark.parametrize(
    "target",
    ["ABSOLUTE", "..", "../..", "x/../..", "sub/../../d2", "../d/ok.txt"],
    ids=["absolute-canary", "parent", "grandparent", "through-link", "sibling-output", "own-name"],
)
def test_links_leading_out_of_their_dir_are_refused(target, canary, host_tmp, isolation):
    """Out by any road, including back in through the output's own name (it would break, or
    point elsewhere, once the folder moves) and into another output."""
    target = str(canary) if target == "ABSOLUTE" else target
    script = (
        "import os\n"
        "os.makedirs('/var/outputs/d'); os.makedirs('/var/outputs/d2')\n"
        "open('/var/outputs/d/ok.txt', 'w').write('fine')\n"
        "os.symlink('.', '/var/outputs/d/x')\n"
        f"os.symlink({target!r}, '/var/outputs/d/l')\n"
    )
    with pytest.raises(InvalidOutput, match=r"'/var/outputs/d/l' is a link") as info:
        writes("verbatim", script, {"d": Dir, "d2": Dir}).run()
    assert info.value.name == "d"
    assert left_behind(host_tmp) == []


def test_declared_output_that_is_itself_a_link_is_refused(canary, host_tmp, isolation):
    for target in (str(canary), "other", "f"):
        script = (
            "import os\n"
            "open('/var/outputs/other', 'w').write('x')\n"
            f"os.symlink({target!r}, '/var/outputs/f')\n"
        )
        with pytest.raises(InvalidOutput, match=r"output 'f': '/var/outputs/f' is a link"):
            writes("verbatim", script, {"f": File, "other": str}).run()
    assert left_behind(host_tmp) == []


def test_links_that_stay_inside_a_dir_are_kept_and_resolve_inside(host_tmp, isolation):
    script = (
        "import os\n"
        "os.makedirs('/var/outputs/d/sub/deeper')\n"
        "open('/var/outputs/d/real.txt', 'w').write('real')\n"
        "os.symlink('../real.txt', '/var/outputs/d/sub/up')\n"
        "os.symlink('.', '/var/outputs/d/self')\n"
        "os.symlink('self/self/sub/../real.txt', '/var/outputs/d/around')\n"
        "os.symlink('../../sub', '/var/outputs/d/sub/deeper/loop')\n"
    )
    out = writes("verbatim", script, {"d": Dir}).run()
    root = out.path.resolve()
    for path in root.rglob("*"):
        assert root in Path(os.path.realpath(path)).parents or Path(os.path.realpath(path)) == root
    assert (out.path / "sub" / "up").read_text() == "real"
    assert (out.path / "around").read_text() == "real"
    assert os.readlink(out.path / "self") == "."


def test_hard_link_within_an_output_is_a_copy_and_across_outputs_is_refused(host_tmp, isolation):
    inside = (
        "import os\n"
        "os.makedirs('/var/outputs/d')\n"
        "open('/var/outputs/d/a', 'w').write('data')\n"
        "os.link('/var/outputs/d/a', '/var/outputs/d/b')\n"
    )
    out = writes("verbatim", inside, {"d": Dir}).run()
    assert (out.path / "b").read_text() == "data"
    assert os.stat(out.path / "a").st_ino != os.stat(out.path / "b").st_ino

    across = (
        "import os\n"
        "os.makedirs('/var/outputs/d1'); os.makedirs('/var/outputs/d2')\n"
        "open('/var/outputs/d1/a', 'w').write('data')\n"
        "os.link('/var/outputs/d1/a', '/var/outputs/d2/h')\n"
    )
    with pytest.raises(InvalidOutput, match=r"'/var/outputs/d2/h' is a hard link to 'd1/a'"):
        writes("verbatim", across, {"d1": Dir, "d2": Dir}).run()


@pytest.mark.parametrize("where", ["top", "inside"])
def test_fifo_in_outputs_is_refused_naming_it(where, host_tmp, isolation):
    path = "/var/outputs/p" if where == "top" else "/var/outputs/d/p"
    script = f"import os\nos.makedirs('/var/outputs/d')\nos.mkfifo({path!r})\n"
    outputs = {"p": File} if where == "top" else {"d": Dir}
    with pytest.raises(InvalidOutput, match=rf"'{path}' is not a regular file, directory or link"):
        writes("command", script, outputs).run()
    assert left_behind(host_tmp) == []


@pytest.mark.parametrize(
    "raw",
    [b"esc\x1b]52;c;cHduZWQ=\x07", b"new\nline", b"\xff\xfe"],
    ids=["terminal-escape", "newline", "undecodable"],
)
def test_odd_names_in_a_dir_are_refused_escaped(raw, host_tmp, isolation):
    script = (
        "import os\n"
        "os.makedirs(b'/var/outputs/d')\n"
        f"open(b'/var/outputs/d/' + {raw!r}, 'w').write('x')\n"
    )
    with pytest.raises(InvalidOutput, match=r"control character or undecodable byte") as info:
        writes("verbatim", script, {"d": Dir}).run()
    text = assert_one_line(info.value)
    assert "\x1b" not in text and "\x07" not in text
    assert left_behind(host_tmp) == []


def test_undeclared_junk_is_skipped_and_never_written(canary, host_tmp, isolation):
    script = (
        "import os\n"
        "os.symlink('.', '/var/outputs/x')\n"
        f"os.symlink({chain_to(canary)!r}, '/var/outputs/g')\n"
        f"os.symlink({str(canary)!r}, '/var/outputs/abs')\n"
        "os.mkfifo('/var/outputs/fifo')\n"
        "os.makedirs('/var/outputs/many')\n"
        "for i in range(2000):\n"
        "    open(f'/var/outputs/many/{i}', 'w').close()\n"
        "open('/var/outputs/y', 'w').write('42')\n"
    )
    assert writes("command", script, {"y": int}).run() == 42
    assert left_behind(host_tmp) == []  # a scalar output keeps nothing on the host


def test_returned_dir_passed_to_a_second_sandbox_carries_only_its_own_files(
    canary, host_tmp, isolation
):
    first = (
        "import os\n"
        "os.makedirs('/var/outputs/d/sub')\n"
        "open('/var/outputs/d/sub/data', 'w').write('payload')\n"
        "os.symlink('sub/data', '/var/outputs/d/alias')\n"
    )
    made = writes("verbatim", first, {"d": Dir}).run()
    second = create(
        "reader",
        code=(
            "import os\n"
            "seen = []\n"
            "for root, dirs, files in os.walk(d, followlinks=True):\n"
            "    for f in sorted(files):\n"
            "        seen.append(open(os.path.join(root, f)).read())\n"
            "text = '|'.join(sorted(seen))\n"
        ),
        inputs={"d": Dir},
        outputs={"text": str},
    )
    assert second.run(d=made) == "payload|payload"
    assert canary.read_text() == SECRET
    assert stat.S_IMODE(canary.stat().st_mode) == 0o600


# 2. Links in inputs -------------------------------------------------------------------------


def test_dir_input_with_links_out_is_refused_and_the_host_is_untouched(tmp_path, canary, host_tmp):
    outside_dir = tmp_path / "secret-dir"
    outside_dir.mkdir(mode=0o700)
    os.chmod(outside_dir, 0o700)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok.txt").write_text("ok")
    sandbox = create(
        "in", code="import os\nn = len(os.listdir(d))", inputs={"d": Dir}, outputs={"n": int}
    )
    for link, target in (("to-file", canary), ("to-dir", outside_dir), ("up", Path(".."))):
        (tree / link).symlink_to(target)
        with pytest.raises(SandboxConfigError, match=rf"input 'd': 'd/{link}' is a link to"):
            sandbox.run(d=Dir(tree))
        (tree / link).unlink()
    assert stat.S_IMODE(canary.stat().st_mode) == 0o600
    assert stat.S_IMODE(outside_dir.stat().st_mode) == 0o700
    assert canary.read_text() == SECRET
    assert left_behind(host_tmp) == []


def test_dir_input_links_inside_are_kept_and_modes_only_change_on_the_copies(
    tmp_path, host_tmp, isolation
):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "data").write_text("payload")
    os.chmod(tree / "sub" / "data", 0o600)
    (tree / "alias").symlink_to("sub/data")
    (tree / "again").symlink_to(tree / "sub")  # absolute, but inside: kept as a relative link
    sandbox = create(
        "in",
        code=(
            "import os\n"
            "text = open(os.path.join(d, 'alias')).read()\n"
            "text += open(os.path.join(d, 'again/data')).read()\n"
        ),
        inputs={"d": Dir},
        outputs={"text": str},
    )
    assert sandbox.run(d=Dir(tree)) == "payloadpayload"
    assert stat.S_IMODE((tree / "sub" / "data").stat().st_mode) == 0o600


def test_fifo_in_a_dir_input_is_refused_not_waited_on(tmp_path, host_tmp):
    tree = tmp_path / "tree"
    tree.mkdir()
    os.mkfifo(tree / "pipe")
    sandbox = create("in", code="pass", inputs={"d": Dir})
    with pytest.raises(SandboxConfigError, match=r"input 'd': 'd/pipe' is not a file, directory"):
        sandbox.run(d=Dir(tree))
    assert left_behind(host_tmp) == []


# 3. Size and time on the host ----------------------------------------------------------------


def test_sparse_file_past_the_disk_limit_is_refused_before_its_data_is_read(host_tmp, isolation):
    sandbox = create(
        "sparse", command=["truncate", "-s", "700M", "/var/outputs/big"], outputs={"big": File}
    )
    with pytest.raises(OutputLimitExceeded, match=r"more than the disk limit \(256 MiB"):
        sandbox.run()
    assert left_behind(host_tmp) == []


def test_sparse_file_within_the_limit_keeps_its_holes_on_the_host(host_tmp, isolation):
    script = "f = open('/var/outputs/big', 'wb')\nf.seek(40 * 2**20)\nf.write(b'end')\n"
    big = writes("verbatim", script, {"big": File}).run()
    info = os.stat(big.path)
    assert info.st_size == 40 * 2**20 + 3
    assert info.st_blocks * 512 < 2**20  # the zeros were not written out
    with open(big.path, "rb") as f:
        f.seek(40 * 2**20)
        assert f.read() == b"end"


def test_a_flood_of_empty_files_counts_against_the_limit(host_tmp, isolation):
    """Empty files weigh nothing on a tmpfs but cost the host a file each: each counts as a
    block. (20k files against a 4 MiB limit: the same rule as 100k against the default.)"""
    script = (
        "import os\n"
        "os.makedirs('/var/outputs/d')\n"
        "for i in range(20_000):\n"
        "    open(f'/var/outputs/d/{i}', 'w').close()\n"
    )
    sandbox = writes("verbatim", script, {"d": Dir}, resources={"disk": "4m"}, timeout=120)
    with pytest.raises(OutputLimitExceeded, match=r"disk limit \(4 MiB, each entry counted"):
        sandbox.run()
    assert left_behind(host_tmp) == []


def test_collection_that_cannot_finish_ends_at_the_timeout(host_tmp, isolation):
    """The code leaves a process behind that stops (SIGSTOP) the ``tar`` collecting its
    outputs: collection would wait forever; the run's timeout ends it. The timeout itself is
    the only bound here (no timing is asserted)."""
    stopper = (
        "import os, signal, time\n"
        "end = time.monotonic() + 60\n"
        "while time.monotonic() < end:\n"
        "    for pid in os.listdir('/proc'):\n"
        "        try:\n"
        "            if open(f'/proc/{pid}/comm').read().strip() == 'tar':\n"
        "                os.kill(int(pid), signal.SIGSTOP)\n"
        "        except OSError:\n"
        "            pass\n"
    )
    script = (
        "import os, subprocess, sys\n"
        "os.makedirs('/var/outputs/d')\n"
        "open('/var/outputs/d/bulk', 'wb').write(os.urandom(32 * 2**20))\n"
        f"subprocess.Popen([sys.executable, '-c', {stopper!r}], start_new_session=True,\n"
        "    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    )
    sandbox = writes("verbatim", script, {"d": Dir}, timeout=5)
    with pytest.raises(SandboxTimeout, match="timed out after 5 s"):
        sandbox.run()
    assert left_behind(host_tmp) == []


@pytest.fixture
def tiny_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 2 MiB tmpfs as the host's temp folder: the host disk fills up (needs root)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    monkeypatch.setattr(tempfile, "tempdir", str(mount))
    try:
        yield mount
    finally:
        settle()
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs needs root")
def test_full_host_disk_while_staging_or_collecting_is_a_clear_container_error(tmp_path, tiny_tmp):
    big = tmp_path / "big"
    big.write_bytes(os.urandom(4 * 2**20))
    staging = create("in", code="pass", inputs={"f": File})
    with pytest.raises(ContainerError, match=r"host ran out of disk space while staging inputs"):
        staging.run(f=File(big))
    script = "import os\nopen('/var/outputs/f', 'wb').write(os.urandom(4 * 2**20))\n"
    with pytest.raises(
        ContainerError, match=r"ran out of disk space while collecting outputs"
    ) as info:
        writes("verbatim", script, {"f": File}).run()
    assert_one_line(info.value)
    settle()
    assert list(tiny_tmp.iterdir()) == []


# 13. Output decoding --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "content"),
    [
        ("timedelta", "inf"),
        ("timedelta", "1e999999"),
        ("timedelta", "NaN"),
        ("json", "[" * 100_000),
    ],
    ids=["timedelta-inf", "timedelta-huge", "timedelta-nan", "json-100k-deep"],
)
def test_unreadable_output_is_one_line_naming_it(tag, content, host_tmp):
    """A `File` declared first is not kept either: a failed run leaves no folder behind."""
    script = (
        "open('/var/outputs/f', 'w').write('fine')\n"
        f"open('/var/outputs/v', 'w').write({content!r})\n"
    )
    with pytest.raises(InvalidOutput, match=rf"output 'v' is not a valid {tag}") as info:
        writes("verbatim", script, {"f": File, "v": tag}).run()
    assert info.value.name == "v"
    assert_one_line(info.value)
    assert left_behind(host_tmp) == []


@pytest.mark.parametrize("mode", ["verbatim", "command"])
@pytest.mark.parametrize("record", ['{"y": "file", "z": "dir"}', "[[[garbage", "{}" * 1000])
def test_type_record_is_ignored_outside_auto_io_and_untyped_outputs_stay_text(
    mode, record, tmp_path, host_tmp
):
    script = (
        f"open('/var/outputs/.inferred-types.json', 'w').write({record!r})\n"
        f"open('/var/outputs/y', 'w').write({str(tmp_path)!r})\n"
        "import os; os.makedirs('/var/outputs/z')\n"
    )
    y = writes(mode, script, {"y": None}).run()
    assert y == str(tmp_path) and not isinstance(y, File | Dir)
    with pytest.raises(InvalidOutput, match=r"output 'z': '?/var/outputs/z'? is not a file"):
        writes(mode, script, {"z": None}).run()


@pytest.mark.parametrize("record", ['{"y": "file"}', '{"y": "dir"}', '{"y": 3}', "[[["])
def test_forged_type_record_in_auto_io_is_refused_naming_the_output(record, host_tmp):
    """In auto-IO the code shares the runner's process, so it can make the runner write any
    record; an untyped output still never becomes a path."""
    script = f"import json\njson.dumps = lambda *args, **kwargs: {record!r}\ny = '/etc/passwd'\n"
    with pytest.raises(InvalidOutput, match=r"output 'y': the auto-IO runner's record") as info:
        writes("auto", script, {"y": None}).run()
    assert_one_line(info.value)
    assert left_behind(host_tmp) == []


def test_auto_io_outputs_replace_a_fifo_or_link_the_code_left_at_their_names(
    canary, host_tmp, isolation
):
    """Left in place, the FIFO would block the runner's write until the timeout (bounded at
    60 s here only so a regression fails instead of hanging) and the link would redirect it."""
    script = (
        "import os\n"
        "os.mkfifo('/var/outputs/y')\n"
        f"os.symlink({str(canary)!r}, '/var/outputs/z')\n"
        "os.mkfifo('/var/outputs/.inferred-types.json')\n"
        "y = 1\n"
        "z = 'text'\n"
    )
    assert writes("auto", script, {"y": int, "z": None}, timeout=60).run() == (1, "text")


# A hostile ``tar``: the image is the user's, so the stream itself is checked ------------------


def tar_stream(*members: tuple[tarfile.TarInfo, bytes]) -> list[bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data))
    return [buffer.getvalue()]


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def unpack(chunks: list[bytes], dest: Path, *, limit: int = 2**20) -> None:
    extract_outputs(chunks, dest, ["d"], limit=limit, deadline=time.monotonic() + 60)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([(member("d/../../escape"), b"x")], r"'/var/outputs/d/\.\./\.\./escape' has a '\.\.'"),
        ([(member("d/h", tarfile.LNKTYPE, "/etc/shadow"), b"")], r"hard link to '/etc/shadow'"),
        ([(member("d/a"), b"1"), (member("d/a"), b"2")], r"'/var/outputs/d/a' appears twice"),
        ([(member("d/f"), b"1"), (member("d/f/x"), b"2")], r"cannot be written on the host"),
        ([(member("d/l", tarfile.SYMTYPE, "/etc"), b""), (member("d/l/x"), b"")], r"under a link"),
        ([(member("d/c", tarfile.CHRTYPE), b"")], r"'/var/outputs/d/c' is not a regular file"),
    ],
    ids=["dotdot", "hard-link-out", "twice", "file-as-folder", "under-a-link", "device"],
)
def test_hostile_tar_stream_is_refused_naming_the_entry(entries, message, tmp_path):
    dest = tmp_path / "out"
    with pytest.raises(InvalidOutput, match=message) as info:
        unpack(tar_stream(*entries), dest)
    assert info.value.name == "d"
    assert not (tmp_path / "escape").exists()


def test_hostile_tar_stream_outside_the_declared_names_is_never_written(tmp_path):
    dest = tmp_path / "out"
    unpack(tar_stream((member("/abs"), b"x"), (member("../up"), b"x"), (member("e/f"), b"x")), dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "up").exists()


def test_hostile_tar_header_claiming_a_terabyte_stops_before_its_data(tmp_path):
    huge = member("d/big")
    huge.size = 2**40
    header = huge.tobuf(format=tarfile.GNU_FORMAT)
    with pytest.raises(OutputLimitExceeded, match="more than the disk limit"):
        unpack([header, b"\0" * 4096], tmp_path / "out")  # no terabyte follows: never read


def test_garbage_instead_of_a_tar_stream_is_a_clear_error(tmp_path):
    with pytest.raises(ContainerError, match=r"could not read /var/outputs: its tar stream"):
        unpack([os.urandom(4096)], tmp_path / "out")


def test_link_chain_in_a_sandbox_cell_is_one_line_and_the_kernel_goes_on(
    shell, docker_engine, canary, capsys, host_tmp
):
    body = (
        "import os\n"
        "os.symlink('.', '/var/outputs/x')\n"
        f"os.symlink({chain_to(canary)!r}, '/var/outputs/g')\n"
    )
    result = shell.run_cell(f"%%sandbox --verbatim --out g:File\n{body}")
    assert isinstance(result.error_in_exec, InvalidOutput)
    out = capsys.readouterr()
    assert "InvalidOutput: output 'g': '/var/outputs/g' is a link" in out.out + out.err
    assert "Traceback" not in out.out + out.err and SECRET not in out.out + out.err
    assert "g" not in shell.user_ns
    assert shell.run_cell("1 + 1").result == 2


# 14. Parts tar cannot read -------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("entry", ["sub", "sub/secret.txt"], ids=["folder", "file"])
def test_an_unreadable_part_of_a_dir_fails_the_run_naming_it(entry, mode, host_tmp, isolation):
    """The code makes part of its `Dir` unreadable (``chmod 000``) before it exits: tar
    skips it with a message on its stderr, which was thrown away, so the run was ``ok`` with
    a `Dir` lacking the part. Now the run fails, in one line naming the entry as tar does,
    and keeps nothing."""
    script = (
        "import os\n"
        "os.makedirs('/var/outputs/d/sub')\n"
        "open('/var/outputs/d/ok.txt', 'w').write('fine')\n"
        "open('/var/outputs/d/sub/secret.txt', 'w').write('lost')\n"
        f"os.chmod('/var/outputs/d/{entry}', 0)\n"
    )
    with pytest.raises(ContainerError) as info:
        writes(mode, script, {"d": Dir}).run()
    text = assert_one_line(info.value)
    assert f"d/{entry}" in text and "could not be read whole" in text, text
    assert info.value.record is not None and info.value.record["status"] == "error"
    assert left_behind(host_tmp) == []


def test_outputs_tar_can_read_still_come_back_whole_and_a_missing_one_is_named(host_tmp, isolation):
    """What tar can read is unchanged: every part of a `Dir` (an empty folder too) comes back,
    and an output never written is still `MissingOutput` naming it (tar is not asked for it,
    so its "Cannot stat" is no failure of the others)."""
    script = (
        "import os\n"
        "os.makedirs('/var/outputs/d/sub/empty')\n"
        "open('/var/outputs/d/sub/f.txt', 'w').write('kept')\n"
    )
    (d,) = (writes("verbatim", script, {"d": Dir}).run(),)
    assert sorted(str(p.relative_to(d.path)) for p in Path(d.path).rglob("*")) == [
        "sub",
        "sub/empty",
        "sub/f.txt",
    ]
    with pytest.raises(MissingOutput, match=r"declared output 'e' was not written"):
        writes("verbatim", script, {"d": Dir, "e": File}).run()
