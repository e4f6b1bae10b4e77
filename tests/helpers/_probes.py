"""Code that probes a sandbox from inside (its network, uid, capabilities, no_new_privs, pids
limit, writable folders) and what a confined one answers: one-shot runs and session cells
run the same probes."""

from __future__ import annotations

from jupyter_sandbox.sandbox import _client, _pool


def disk_fill(*writable: str) -> str:
    """Code that fills each of ``writable`` and then the read-only ``/home`` and ``/``,
    printing the error each write ends with (a session's cells run it too)."""
    targets = (*(f"{folder}/fill" for folder in writable), "/home/fill", "/fill")
    return (
        "import errno, os\n"
        f"for target in {targets!r}:\n"
        "    try:\n"
        "        with open(target, 'wb') as f:\n"
        "            while True:\n"
        "                f.write(b'x' * 2**20)\n"
        "                f.flush()\n"
        "    except OSError as exc:\n"
        "        print(target, errno.errorcode[exc.errno])\n"
        "    if os.path.exists(target):\n"
        "        os.remove(target)\n"
    )


def disk_filled(isolation: str, *writable: str) -> list[str]:
    """What `disk_fill` prints when the tmpfs limit and the read-only root hold."""
    read_only = "EROFS" if isolation == "container" else "EACCES"  # gVisor: permissions first
    return [
        *(f"{folder}/fill ENOSPC" for folder in writable),
        f"/home/fill {read_only}",
        f"/fill {read_only}",
    ]


NETWORK_PROBE = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
    "    result = 'connected'\n"
    "except OSError as exc:\n"
    "    result = type(exc).__name__\n"
)
"""Sets ``result``: ``connected``, or the error a connection out ended with."""


CONFINEMENT_PROBE = (
    "import os\n"
    "status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\\t' in line)\n"  # noqa: E501
    "uid = os.getuid()\n"
    "caps = status['CapEff'].strip()\n"
    "import ctypes\n"
    "nnp = str(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))\n"  # PR_GET_NO_NEW_PRIVS
    "files = ('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max')\n"
    "pids = next((open(f).read().strip() for f in files if os.path.exists(f)), '')\n"
)
"""Sets ``uid``, ``caps`` (effective, hex), ``nnp`` (no_new_privs) and ``pids`` (the limit)."""


def assert_confined(uid: int, caps: str, nnp: str, pids: str, isolation: str, limit_holds) -> None:
    """What `CONFINEMENT_PROBE` finds in any sandbox: no host account's uid, no capability,
    no_new_privs, the pids limit where the engine shows it."""
    if _client.engine_of(_client.client()).rootless:
        # rootless Podman: uid 1000 of the user's namespace is one of its subordinate ids (no
        # host account's); no pids limit on cgroup v1, the run went ahead as accepted
        assert uid == 1000
        assert pids == ("256" if limit_holds("pids") else "")
    else:
        assert _pool.UID_BASE <= uid < _pool.UID_BASE + _pool.UID_SPAN  # no host account's uid
        # gVisor shows the code no cgroup files (the fork bomb test holds its limit all the same)
        assert pids == ("256" if isolation == "container" else "")
    assert int(caps, 16) == 0
    assert nnp == "1"
