"""Every file of the store is checked whole, as another local user would attack it.

A store folder may be group-writable (umask 002 setups). A member of that group cannot read
the store (0600), but could plant the files SQLite opens beside it before the user's first
cell: a ``-wal`` they can read receives every write (tools' results, code), one they wrote is
read as the store's own, a hot ``-journal`` is rolled back into it, and a FIFO planted as
``key`` hangs the first ``%%orchestrate`` cell forever. Each is refused with one line naming
the file and the command that fixes it. The second user is real (``useradd``), the cells run
in a real kernel.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _kernels import kernel

PEER = "jupyter-sandbox-peer"
SECRET = "s3cr3t-in-the-cell-7f1e"
CELL = f'%%orchestrate\nnote = "{SECRET}"\nadd(40, 2)'


@pytest.fixture(scope="module")
def peer() -> pwd.struct_passwd:
    """A second local user (created once per machine), as in test_install."""
    if os.geteuid() != 0:
        pytest.fail("creating the second user needs root (the README's test command runs as root)")
    try:
        pwd.getpwnam(PEER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", PEER], check=True)
    return pwd.getpwnam(PEER)


@pytest.fixture
def shared(peer: pwd.struct_passwd) -> Iterator[Path]:
    """The user's store folder, writable by a group the peer is in (the store accepts it)."""
    folder = Path(tempfile.mkdtemp(prefix="jupyter-sandbox-shared-"))
    os.chown(folder, os.geteuid(), peer.pw_gid)
    os.chmod(folder, 0o770)
    yield folder
    shutil.rmtree(folder)


def as_peer(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", PEER, "--", "sh", "-c", command],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_file_a_group_member_plants_beside_the_store_is_refused(
    shared: Path, suffix: str
) -> None:
    store = shared / "store.sqlite"
    planted = Path(f"{store}{suffix}")
    assert as_peer(f"umask 0; : > {planted}").returncode == 0
    assert planted.stat().st_mode & stat.S_IROTH
    with kernel(store) as k:
        ran = k.run(CELL)
        assert ran.status == "error", ran.text
        assert ran.text.strip().count("\n") == 0, ran.text  # one line
        assert f"{planted} belongs to uid {pwd.getpwnam(PEER).pw_uid}" in ran.text
        assert f"run rm {planted}" in ran.text
        # the peer's file received nothing of the cell
        assert SECRET not in as_peer(f"cat {planted}").stdout
        # the line's own command fixes it, and the next cell works
        k.ok(f"!rm {planted}")
        assert k.ok(CELL).value == "42"
    for path in shared.iterdir():  # what SQLite made meanwhile is the user's alone
        info = path.lstat()
        assert info.st_uid == os.geteuid() and not info.st_mode & 0o077, path


def test_a_fifo_planted_as_the_key_is_refused_at_once(shared: Path) -> None:
    """Before, the first cell opened it for reading and waited for a writer forever."""
    key = shared / "key"
    assert as_peer(f"umask 0; mkfifo {key}").returncode == 0
    with kernel(shared / "store.sqlite") as k:
        ran = k.run(CELL, timeout=60)
        assert ran.status == "error", ran.text
        assert ran.text.strip().count("\n") == 0, ran.text
        assert f"key file {key} is not a regular file: run rm {key}" in ran.text


def test_a_link_planted_as_the_wal_is_not_followed(shared: Path) -> None:
    """A ``-wal`` that is a link to a file the peer reads would receive the writes."""
    target = Path(tempfile.mkdtemp(prefix="jupyter-sandbox-peer-")) / "wal"
    try:
        os.chown(target.parent, pwd.getpwnam(PEER).pw_uid, -1)
        planted = as_peer(f"umask 0; : > {target}; ln -s {target} {shared}/store.sqlite-wal")
        assert planted.returncode == 0
        with kernel(shared / "store.sqlite") as k:
            ran = k.run(CELL)
        assert ran.status == "error", ran.text
        assert "store.sqlite-wal is a symbolic link: run rm" in ran.text
        assert target.stat().st_size == 0
    finally:
        shutil.rmtree(target.parent)
