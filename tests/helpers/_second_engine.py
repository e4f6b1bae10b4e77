"""A private ``dockerd`` for tests that restart or stop the engine under a run: its own data
root, exec root, socket and network namespace, so the shared engine never notices."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox import default_base_image

BASE_IMAGE = default_base_image()
_BOUND = 120.0


class _Engine:
    """A ``dockerd`` of the test's own, restartable, in a folder of its own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="jsbx-d2-"))  # short: socket paths max 108
        # in memory: loading the image and deleting it afterwards take seconds, not a minute
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "jsbx-d2", self.root], check=True)
        self.host = f"unix://{self.root / 'sock'}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.root / "log").open("ab")
        # its own network namespace: a dockerd started with --bridge=none deletes the host's
        # docker0, which the shared engine's bridge network needs
        self.process = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--",
                "dockerd",
                f"--data-root={self.root / 'data'}",
                f"--exec-root={self.root / 'exec'}",
                f"--pidfile={self.root / 'pid'}",
                f"-H={self.host}",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--shutdown-timeout=1",
                "--add-runtime=runsc=/usr/bin/runsc",  # for the tests' gVisor half
            ],
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + _BOUND
        while self.docker("version").returncode != 0:
            assert self.process.poll() is None, (self.root / "log").read_text()[-2000:]
            assert time.monotonic() < deadline, "second dockerd did not come up"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(_BOUND)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def docker(self, *args: str, **kwargs) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, **kwargs)

    def remove(self) -> None:
        """Stop it and delete its folders (unmounting its tmpfs and anything left on it)."""
        self.stop()
        mounts = Path("/proc/mounts").read_text().split("\n")
        for mount in sorted((m.split()[1] for m in mounts if m), reverse=True):
            if mount.startswith(str(self.root)):
                subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def second_engine(docker_engine) -> Iterator[_Engine]:
    """A private engine holding the base image (copied once per session from the main one)."""
    links = set(os.listdir("/sys/class/net"))
    engine = _Engine()
    try:
        engine.start()
        save = subprocess.Popen(["docker", "save", BASE_IMAGE], stdout=subprocess.PIPE)
        loaded = engine.docker("load", stdin=save.stdout)
        assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr
        yield engine
    finally:
        engine.remove()
    assert not engine.root.exists(), f"second engine left {engine.root} behind"
    assert links <= set(os.listdir("/sys/class/net")), "the second engine removed host links"
