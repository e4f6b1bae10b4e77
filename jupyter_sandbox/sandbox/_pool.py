"""Containers' lives: created confined, started ahead of need, used once, always removed.

Starting a container costs most of a run (~0.3-0.4 s measured, network namespace and all). After
a run takes a container, fresh ones for the same image and limits are started in the background
and wait, unused, for the next runs, their interpreter already started (`_warm`): a warm run
then costs a write of the program and a read of its output, not a start, not even an exec.
Every container still runs exactly one program; a spare never used is a clean container whose
interpreter waits on its stdin. A spare not taken within `_IDLE` (5 min) is removed; one that
died, was tampered with or whose attach stream broke is removed when a run asks for it
(`_warm.probe`), and the run takes the next.

How many spares wait per image and limits follows demand: as many as runs of that key ran at
once at the peak of the last `_IDLE` seconds (one for cells run one at a time, 16 after a
fan-out of 16), or as the longest row of runs back to back in that time (each asked for
within `_IN_A_ROW` s of the previous one's return to its caller: 4 after a loop of 4 runs,
which one refill cannot keep up with), at most `Pool.max_spares` in all (a full pool makes room
by taking a spare of the key that has the most: `_crowding`). They are started one at a
time by one thread per key, and not while several runs of the key go on, nor beside a run of
it: refilling waits for the run's end (and while spares are left, for the end of a row of
runs), so it does not compete with runs for the CPU, unless a row used up its spares.

A spare's own process is `_scripts.SPARE_SCRIPT` and its waiter. A run that finds no spare
does not start one and wait for it: `acquire` creates a container whose own process is the
run's script (`_scripts.OWN_SCRIPT`), and the caller starts it (`_container`). Either way outputs
live on a size-limited tmpfs and are read back by the script's ``tar``, so a disk fill cannot
reach the host, and secrets never enter the container's config (they cross on the attach
stream). Removal of a used container happens off the caller's path.

When the kernel dies without cleaning up (SIGKILL, a server that stops waiting), its watchdog
(`_watchdog`, started with its first container) removes its containers at once. The last
resort, should the watchdog die too, is the container's own clock: a spare's sleep lasts
`lifetime` (5 min idle + the run's timeout + 30 s), the longest a container can be needed; a
run's script kills the run after its timeout + 30 s. Then the container removes itself
(``auto_remove``), even if no kernel ever loads the extension again to reap it. A spare whose
kernel is gone ends sooner: the engine closes its stdin with the kernel's connection.

All of this state (live containers, spares, demand, background jobs) is one `Pool` object under
one Condition; the process has one (`current`), which the module's functions use, and a test may
install a fresh one (`install`; the ``sandbox_pool`` fixture in tests/conftest.py).

Each container runs as a uid of its own, drawn from a range no host account has (`fresh_uid`):
a process's environment (secrets included) is readable in ``/proc/<pid>/environ`` by every
host process of the same uid, and the image's uid 1000 is the first human user on most desktops.
(Engines that map container uids into a subordinate range, rootless or userns-remapped, keep
the image's uid: there it is no host user's already, and a uid from our range has no mapping.)
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import contextvars
import dataclasses
import grp
import os
import pwd
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from .._shared import _defaults as default
from .._shared._accounts import account_lines
from .._shared._errors import ContainerError
from .._shared._instances import Default
from .._shared._owner import temp_prefix
from . import _warm, _watchdog
from ._attach import Attached
from ._baseimage import SANDBOX_UID
from ._client import KIND, LABEL, engine_of, owner_labels
from ._engine import require_limits, tmpfs_owner
from ._io import INPUTS, OUTPUTS, PROGRAM
from ._isolation import Isolation, pids_limit, purge, runtime
from ._spec import Network, Resources, parse_size

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

UID_BASE = 2_100_000_000
UID_SPAN = 40_000_000
"""Containers run as ``UID_BASE + n`` (n random, below ``UID_SPAN``): above the accounts of
``/etc/passwd`` (regular users stop at 60000) and systemd's container ranges (up to
1879048191), clear of the Monty workers' uids (``orchestration._confine.UID_BASE`` + pid, from 2e9)
and below 2^31, where some tools start to misread uids."""
SUBORDINATE_FILES = ("/etc/subuid", "/etc/subgid")
_UID_TRIES = 1000
"""Random draws before `fresh_uid` gives up: only a range nearly all taken runs out."""
_IDLE = default.SPARE_IDLE
"""Seconds a spare container waits for a run; then it is removed."""
_IN_A_ROW = 0.25
"""Seconds between a run's return to its caller and the call of the next one that make them a
row (`_Demand`): a loop's or a run-all's gap (milliseconds), never a person's between cells.
Measured between the calls, not between our containers: what the host does between them
(collecting outputs, checking the image, staging inputs) took over 0.25 s with two CPU hogs
beside it, and a loop of 3 runs left 2 spares. The refill waits that long after a run while
spares are left (`_refill`)."""
_START_WAIT = 5.0
"""Seconds a run waits for a spare already starting before it starts its own container."""
_GONE_WAIT = 10.0
_UP_WAIT = 60.0
"""Seconds a spare's waiter may take to say it is up (a loaded host: it is in the background)."""
_NOT_UP_MAX = 3
"""Spare starts in a row whose waiter said nothing (the stream ended, or `_UP_WAIT` passed)
before the pool starts no more of that image. Not one: a spare killed, or its engine restarted,
from outside during its start says nothing about its image, and one such start made every run
of the image cold for the kernel's life (CI found it: the adversarial spare tests had killed one
being started)."""
_GRACE = 30.0
"""Seconds the container's sleep outlives idle time plus timeout (see `lifetime`)."""


@dataclass(frozen=True)
class ContainerSetup:
    """What a container is started with (its resources, timeout, network, runtime and
    engine); a spare serves only a run of the same image and setup."""

    timeout: float
    resources: Resources
    network: Network | str = "none"
    """``none``, ``bridge``, or an allow-list's internal network (`_egress`)."""
    isolation: Isolation = "container"
    """The runtime (`_isolation`): a spare under runc never serves a gVisor run."""
    engine: str = ""
    """The engine's URL (`run_container` sets it): a spare of one engine never serves a run on
    another."""


@dataclass
class Slot:
    """A container that has run nothing yet, and the host directories it mounts: a started
    spare, or (``own``) one created with the run as its own process, not started yet."""

    container: Container
    work: Path
    born: float
    limits: ContainerSetup
    uid: int
    expiry: threading.Timer | None = None
    """Removes the slot as a spare nobody took within `_IDLE` (cancelled when it is taken)."""
    key: tuple[str, ContainerSetup] | None = None
    """Set while a run holds the slot (`acquire`): it counts in its key's demand."""
    own: bool = False
    """The run is the container's own process (no spare waited): the caller starts it."""
    attached: Attached | None = None
    """A spare's attach stream, held while it waits (`_warm`); the run then owns it."""

    @property
    def user(self) -> str:
        """``uid:gid`` for the container and every process in it (the same number for both)."""
        return f"{self.uid}:{self.uid}"

    @property
    def inputs(self) -> Path:
        return self.work / "inputs"

    @property
    def program(self) -> Path:
        return self.work / "program"


def fresh_uid() -> int:
    """A random uid (and gid) of the reserved range that no host account has: no user or group
    (asked through the name service, so LDAP counts), and no subordinate range of
    ``/etc/subuid``/``/etc/subgid`` (its owner can become those ids in a user namespace)."""
    delegated = [ids for _, _, ranges in account_lines(SUBORDINATE_FILES) for ids in ranges]
    for _ in range(_UID_TRIES):
        uid = UID_BASE + secrets.randbelow(UID_SPAN)
        if any(uid in ids for ids in delegated) or _account(pwd.getpwuid, uid):
            continue
        if not _account(grp.getgrgid, uid):
            return uid
    raise ContainerError(
        f"no free uid in {UID_BASE}..{UID_BASE + UID_SPAN - 1}: host accounts or subordinate "
        "ranges cover it; free part of that range for sandbox containers"
    )


def _account(lookup: Callable[[int], object], uid: int) -> bool:
    """True when the name service knows ``uid`` (``pwd.getpwuid``) or the gid (``grp``)."""
    try:
        lookup(uid)
    except KeyError:
        return False
    return True


@cache
def _host_uids(client: DockerClient) -> bool:
    """True when the container's uids are the host's (a rootful engine without user-namespace
    remapping): only there must the uid be one no host account has. Asked once per engine."""
    if engine_of(client).rootless:  # Podman's info does not say so (`_engine`)
        return False
    options = client.info().get("SecurityOptions") or []
    return not any(o.startswith(("name=rootless", "name=userns")) for o in options)


def lifetime(limits: ContainerSetup, *, spare: bool = True) -> int:
    """Seconds a container lasts at most: the longest it can be needed (waiting as a spare,
    then running for up to the timeout; a container made for its run does not wait), plus a
    grace period. Past it the container is gone even if neither its kernel nor the kernel's
    watchdog is left to remove it: a spare's ``sleep`` ends, a run's script kills the run."""
    return int((_IDLE if spare else 0) + limits.timeout + _GRACE)


def keyed(client: DockerClient, limits: ContainerSetup) -> ContainerSetup:
    """``limits`` with ``client``'s engine: what a spare of it is kept under."""
    return dataclasses.replace(limits, engine=engine_of(client).url)


def _retunable(
    spares: Mapping[_Key, list[Slot]], image: str, limits: ContainerSetup, now: float
) -> tuple[_Key, Slot] | None:
    """The key and oldest spare of ``image`` that `retune` can make a container of ``limits``:
    the same network, runtime, engine and tmpfs size (fixed at creation; the output cap is the
    host's), and a clock that outlasts the run (a spare's ``sleep`` ends `lifetime` after its
    start: its idle time and its own timeout), so the spare's own end never cuts the run short."""
    wanted = limits.resources
    for (spare_image, setup), slots in spares.items():
        if spare_image != image or parse_size(setup.resources.disk) != parse_size(wanted.disk):
            continue
        changed = dataclasses.replace(
            setup.resources,
            cpu=wanted.cpu,
            memory=wanted.memory,
            pids=wanted.pids,
            output=wanted.output,
            disk=wanted.disk,
        )
        if dataclasses.replace(setup, timeout=limits.timeout, resources=changed) != limits:
            continue
        for slot in slots:
            if now - slot.born + limits.timeout <= _IDLE + setup.timeout:
                return (spare_image, setup), slot
    return None


def retune(client: DockerClient, slot: Slot, limits: ContainerSetup) -> bool | None:
    """Set a waiting spare's memory, CPUs and pids to ``limits`` (the engine's update of a
    running container's cgroups) and check that the engine now holds exactly those. True when
    it does, and the slot is then ``limits``'; False when the engine refused these values (a
    bad request: a memory limit below what the waiter uses); None when it cannot change a
    running container's limits at all (gVisor's runsc has no ``update``; an engine whose
    answer kept other values). Unless True, the caller must not use the spare."""
    from docker.errors import APIError

    res = limits.resources
    memory = parse_size(res.memory)
    wanted = {
        "Memory": memory,
        "MemorySwap": memory,
        "NanoCpus": int(float(res.cpu) * 1e9),
        "PidsLimit": pids_limit(res.pids, limits.isolation),
    }
    api = client.api
    container = slot.container.id or ""
    try:
        api._result(api._post_json(api._url("/containers/{0}/update", container), data=wanted))
        held = api.inspect_container(container)["HostConfig"]
    except APIError as error:
        return False if error.is_client_error() else None
    except (OSError, KeyError):
        return None
    if any(held.get(name) != value for name, value in wanted.items()):
        return None
    slot.limits = limits
    return True


def wait_gone(container: Container, until: float, cancel: threading.Event | None = None) -> bool:
    """Wait for the engine's own removal (``auto_remove``), until the monotonic time
    ``until`` or ``cancel``, so "removed" means gone (and its events are all written) when
    this returns; whether it is gone."""
    from docker.errors import NotFound

    while time.monotonic() < until and not (cancel is not None and cancel.is_set()):
        try:
            container.reload()
        except NotFound:
            return True
        time.sleep(0.05)
    return False


_Key = tuple[str, ContainerSetup]


@dataclass
class _Demand:
    """A key's recent runs, which size its spares (`Pool._target`)."""

    running: int = 0
    peak: int = 0
    peak_at: float = -_IDLE
    """When ``peak`` was last reached; it counts for `_IDLE` seconds."""
    ended: float = -_IDLE
    """When a run last gave its container back, or (later) returned to its caller."""
    row: int = 0
    """Runs in the current row: each asked for while another ran or within `_IN_A_ROW` s of
    the last one's return (a loop over ``run``, cells run all at once)."""
    longest: int = 0
    longest_at: float = -_IDLE
    """The longest row of the last `_IDLE` seconds, and when it was last reached: a row
    outpaces one refill (a start takes longer than a warm run), so that many spares wait for
    the next one."""

    def take(self, now: float, asked: float) -> None:
        """A run asked for at ``asked`` (its caller's call) takes a container."""
        self.row = self.row + 1 if self.running or asked - self.ended < _IN_A_ROW else 1
        if self.row >= self.longest or now - self.longest_at >= _IDLE:
            self.longest, self.longest_at = self.row, now
        self.running += 1
        if self.running >= self.peak or now - self.peak_at >= _IDLE:
            self.peak, self.peak_at = self.running, now

    def done(self, now: float) -> None:
        self.running -= 1
        self.ended = now

    def returned(self, now: float) -> None:
        """A run returned to its caller (after `done`): the row's gap starts now."""
        self.ended = max(self.ended, now)

    def hold(self, now: float, spares: bool, preparing: bool) -> float:
        """Seconds the refill waits before it looks again (0: it starts a spare now). While a
        run goes on, unless it is part of a row and no spare is left (``spares``); after a
        run, while spares are left and the next run of a row may come: within `_IN_A_ROW` s
        of the last one's return, or while a run called for is ``preparing`` (checking its
        image, staging, collecting: on a loaded host that outlasted `_IN_A_ROW`, and a spare
        started beside the row)."""
        if self.running:
            return _IN_A_ROW if spares or self.row <= 1 else 0.0
        if spares and preparing:
            return _IN_A_ROW
        return max(self.ended + _IN_A_ROW - now, 0.0) if spares else 0.0

    def target(self, now: float, most: int) -> int:
        """Spares to keep: the peak or the longest row of the last `_IDLE` s, at least 1, at
        most ``most`` (the pool's `Pool.max_spares`)."""
        peak = self.peak if now - self.peak_at < _IDLE else 0
        longest = self.longest if now - self.longest_at < _IDLE else 0
        return min(max(peak, longest, 1), most)

    def forget(self) -> None:
        """Only the runs going on now count (`Pool.settle`)."""
        self.peak, self.peak_at = self.running, -_IDLE
        self.ended, self.row, self.longest, self.longest_at = -_IDLE, 0, 0, -_IDLE


_call_keys: contextvars.ContextVar[list[_Key] | None] = contextvars.ContextVar(
    "_call_keys", default=None
)
"""The keys `Pool.acquire` took containers under inside the current `Pool.call` (its
thread's)."""


class Pool:
    """The process's containers: the live ones, the waiting spares and the demand that sizes
    them, under one Condition. The process has one, `current()`; a test may put a fresh one in
    its place (`install`, the ``sandbox_pool`` fixture) and `close` it after. Background jobs
    (refills, removals) act on the pool that started them."""

    def __init__(self, max_spares: int = default.MAX_SPARES) -> None:
        self.max_spares = max_spares
        """Spares kept at most, all keys together: a full pool makes room by taking a spare of
        the key that has the most (`_crowding`). Each is a sleeping process (~1 MB) and cost
        ~0.3 CPU-s to start."""
        self.lock = threading.Lock()
        self.live: dict[str, Slot] = {}
        """Every container this pool created and has not removed, by id."""
        self.spares: dict[_Key, list[Slot]] = {}
        """Waiting spares per key, oldest first; a key without spares has no entry."""
        self.ready = threading.Condition(self.lock)
        """Notified when a spare is added or a refill ends: runs waiting for one (`acquire`)
        look; and when a run took a key's last spare or ended: its refill, if it waits
        (`_Demand.hold`), looks."""
        self.starting: dict[_Key, int] = {}
        """Spares being started per key: a run waits for one rather than starting its own
        container."""
        self.waiting: dict[_Key, int] = {}
        """Runs waiting for a spare being started, per key: never more than are starting."""
        self.refilling: set[_Key] = set()
        """Keys whose refill thread runs (one each)."""
        self.no_waiter: set[str] = set()
        """Images whose spare's waiter never came up (`_warm.up`: no ``python3``, or one that
        warns as it starts; or `_NOT_UP_MAX` starts in a row said nothing): no spare of them is
        started again by this pool; their runs are cold."""
        self.not_up: dict[str, int] = {}
        """Starts in a row, per image, whose waiter did not come up (`_NOT_UP_MAX`)."""
        self.fixed: set[tuple[str, str]] = set()
        """(engine URL, isolation) whose running containers' limits the engine could not
        change (gVisor's runsc has no ``update``): their spares are not offered to `retune`
        again, so a run of other limits is a cold start at once."""
        self.demand: dict[_Key, _Demand] = {}
        self.called = 0
        """Runs called for that have not returned (`call`); those not holding a container
        (`_Demand.running`) are being prepared or collected (`_preparing`)."""
        self.jobs = 0
        """Background jobs (`_background`) started and not ended: `quiesce` waits for none."""
        self.closing = False

    def _background(self, target: Callable[..., object], *args: object) -> None:
        """Run ``target(*args)`` on a thread of its own, counted until it ends (`quiesce`). A
        bare thread: `threading.Thread.start` waits until the new thread runs, and a run's two
        (its removal, its refill) cost ~6 ms of a warm run on a loaded host."""

        def job() -> None:
            try:
                target(*args)
            finally:
                with self.lock:
                    self.jobs -= 1
                    self.ready.notify_all()

        with self.lock:
            self.jobs += 1
        try:
            _thread.start_new_thread(job, ())
        except BaseException:  # never started: `quiesce` must not wait for it
            with self.lock:
                self.jobs -= 1
                self.ready.notify_all()
            raise

    def _create(
        self,
        client: DockerClient,
        image: str,
        limits: ContainerSetup,
        own: list[str] | None,
        kept: Mapping[str, str] | None = None,
    ) -> Slot:
        """A confined container, created and not started: a spare's (`_warm.spare_command`), or
        with ``own`` as its process; either way attached to (stdin open once, for `_attach`)
        and not logged. ``kept``: the labels of a session that outlives the kernel (`_kept`):
        no owner's labels (neither the watchdog nor the reaper removes it) and a stdin that
        stays open when its attacher leaves, so the next kernel can attach again."""
        _watchdog.ensure_started()
        engine = engine_of(client)
        require_limits(engine)  # never a container whose limits the engine would drop
        res = limits.resources
        uid = fresh_uid() if _host_uids(client) else SANDBOX_UID
        memory = parse_size(res.memory)
        tmpfs = f"rw,nosuid,nodev,size={parse_size(res.disk)}"
        work = Path(tempfile.mkdtemp(prefix=temp_prefix("run")))
        for mount in ("inputs", "program"):
            (work / mount).mkdir(mode=0o755)
            os.chmod(work / mount, 0o755)
        if engine.owner_uid not in (None, 0, os.geteuid()) and os.geteuid() == 0:
            # root driving a user's rootless engine: the engine runs as that user and must
            # reach the mounts through the work folder (mkdtemp's 0700, root's)
            os.chown(work, engine.owner_uid, -1)
        from docker.types import LogConfig

        attached = {
            "stdin_open": True,
            "detach": kept is not None,
            "log_config": LogConfig(type="none"),
        }
        labels = (
            {LABEL: "1", KIND: "run", **owner_labels()} if kept is None else {LABEL: "1", **kept}
        )
        try:
            container = client.containers.create(
                image,
                command=own or _warm.spare_command(lifetime(limits)),
                runtime=runtime(client, limits.isolation),
                user=f"{uid}:{uid}",
                working_dir="/tmp",
                network_mode=limits.network,
                read_only=True,
                tmpfs={
                    "/tmp": f"{tmpfs},mode=1777",
                    OUTPUTS: f"{tmpfs},mode=0755,{tmpfs_owner(engine, uid)}",
                },
                volumes={
                    str(work / "inputs"): {"bind": INPUTS, "mode": "ro"},
                    str(work / "program"): {"bind": PROGRAM, "mode": "ro"},
                },
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=pids_limit(res.pids, limits.isolation),
                mem_limit=memory,
                memswap_limit=memory,
                nano_cpus=int(float(res.cpu) * 1e9),
                labels=labels,
                auto_remove=True,
                # a sleep has nothing to wind down: a stop (an engine shutdown stops every
                # container) need not wait 10 s for it to ignore SIGTERM; nor has a run
                stop_signal="SIGKILL",
                **attached,
            )
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        slot = Slot(container, work, time.monotonic(), limits, uid, own=own is not None)
        with self.lock:
            self.live[container.id or ""] = slot
        return slot

    def _start(self, client: DockerClient, image: str, limits: ContainerSetup) -> Slot:
        """A started spare whose waiter is up (`_warm.up`)."""
        slot = self._create(client, image, limits, None)
        try:
            slot.attached = Attached(client, slot.container.id or "")
            slot.container.start()
            is_up = _warm.up(slot.attached, time.monotonic() + _UP_WAIT)
            with self.lock:
                failed = 0 if is_up else self.not_up.get(image, 0) + 1
                self.not_up[image] = failed
                if is_up is None or failed >= _NOT_UP_MAX:
                    self.no_waiter.add(image)
            if not is_up:
                raise ContainerError(f"a spare of {image} did not start its interpreter")
        except BaseException:
            self.remove(slot)
            raise
        return slot

    def _target(self, key: _Key) -> int:
        """Spares to keep for ``key``: its peak of runs at once in the last `_IDLE` s, at least 1
        (2 after runs back to back found none waiting), at most `max_spares`."""
        demand = self.demand.get(key)
        return 1 if demand is None else demand.target(time.monotonic(), self.max_spares)

    def _refill(self, client: DockerClient, image: str, limits: ContainerSetup) -> None:
        """Start spares for the key, one at a time, until it has `_target` of them. Not while
        several runs of the key go on: a burst needs the CPU more (its last `release` refills).
        Nor beside a run of the key (`_Demand.hold`): a start costs about a third of a CPU-second,
        which a small host takes from the runs it would serve. It waits for the run's end, and
        while spares are left, for the row's end; only a row that used up its spares gets one
        started beside its runs (the next run would otherwise wait for a whole start).

        Deciding to stop and leaving `refilling` happen under one hold of `lock`: a `release`
        that found this thread still running (so started none) is never left without a refill.
        """
        key = (image, limits)
        stopped = False
        try:
            while True:
                with self.lock:
                    demand = self.demand.get(key)
                    busy = demand is not None and demand.running > 1
                    full = not self._room(key) or image in self.no_waiter
                    if (
                        self.closing
                        or busy
                        or full
                        or len(self.spares.get(key, ())) >= self._target(key)
                    ):
                        stopped = True
                        self.refilling.discard(key)
                        self.ready.notify_all()
                        return
                    hold = (
                        demand.hold(time.monotonic(), key in self.spares, self._preparing())
                        if demand
                        else 0.0
                    )
                    if hold:
                        self.ready.wait(hold)
                        continue
                    self.starting[key] = self.starting.get(key, 0) + 1
                try:
                    slot = self._start(client, image, limits)
                except Exception:  # a spare is an optimisation: never an error
                    return
                finally:
                    with self.lock:
                        self.starting[key] -= 1
                        if not self.starting[key]:
                            del self.starting[key]
                if not self._keep(key, slot):
                    return
        finally:
            if not stopped:  # a failed start, or closing
                with self.lock:
                    self.refilling.discard(key)
                    self.ready.notify_all()

    def _crowding(self, key: _Key) -> _Key | None:
        """The key whose spare goes to make room for one of ``key`` in a full pool: the one with
        the most spares, if it has more than ``key`` (call with `lock` held). A fan-out of one
        sandbox fills the pool, yet the sandbox of the cell before keeps its one spare: evicting
        the oldest spare, its own, made every run of it after a fan-out of another a cold one."""
        others = [k for k in self.spares if k != key]
        crowded = max(
            others, key=lambda k: (len(self.spares[k]), -self.spares[k][0].born), default=None
        )
        if crowded is None or len(self.spares[crowded]) <= len(self.spares.get(key, ())):
            return None
        return crowded

    def _preparing(self) -> bool:
        """Whether a run called for holds no container: before its own, or after it, while its
        outputs are collected (call with `lock` held)."""
        return self.called > sum(demand.running for demand in self.demand.values())

    def _spare_count(self) -> int:
        """Spares waiting, all keys together (call with `lock` held)."""
        return sum(map(len, self.spares.values()))

    def _room(self, key: _Key) -> bool:
        """Whether a spare of ``key`` may be added (call with `lock` held)."""
        return self._spare_count() < self.max_spares or self._crowding(key) is not None

    def _keep(self, key: _Key, slot: Slot) -> bool:
        """Make ``slot`` a waiting spare (evicting beyond `max_spares`: see `_crowding`); False
        if the pool is closing or holds its share of spares for ``key`` already, and then
        ``slot`` is removed."""
        evicted: list[Slot] = []
        with self.lock:
            keep = not self.closing
            while keep and self._spare_count() >= self.max_spares:
                crowded = self._crowding(key)
                if crowded is None:
                    keep = False
                else:
                    evicted.append(self._take(crowded))
            if keep:
                self.spares.setdefault(key, []).append(slot)
                slot.expiry = threading.Timer(_IDLE, self._expire, (key, slot))
                slot.expiry.daemon = True
                slot.expiry.start()
                self.ready.notify_all()
        for extra in evicted if keep else [*evicted, slot]:
            self.remove(extra)
        return keep

    def _take(self, key: _Key, slot: Slot | None = None) -> Slot:
        """Pop ``slot`` (default: the key's oldest spare) and cancel its expiry (call with
        `lock` held)."""
        slots = self.spares[key]
        slot = slots.pop(0) if slot is None else slots.pop(slots.index(slot))
        if not slots:
            del self.spares[key]
        if slot.expiry is not None:
            slot.expiry.cancel()
        return slot

    def _expire(self, key: _Key, slot: Slot) -> None:
        """An idle spare's time is up: remove it, unless a run took it meanwhile."""
        with self.lock:
            if slot not in self.spares.get(key, ()):
                return
            self._take(key, slot)
        self.remove_later(slot)  # tracked, so `quiesce` waits for it

    def _claim(self, key: _Key) -> Slot | None:
        """A waiting spare for ``key``, or one being started if no other run waits for it
        (up to `_START_WAIT`); None if there is neither. Call with `lock` held."""
        if key not in self.spares and self.starting.get(key, 0) > self.waiting.get(key, 0):
            self.waiting[key] = self.waiting.get(key, 0) + 1
            try:
                self.ready.wait_for(
                    lambda: key in self.spares or key not in self.starting, _START_WAIT
                )
            finally:
                self.waiting[key] -= 1
        return self._take(key) if key in self.spares else None

    def acquire(
        self,
        client: DockerClient,
        image: str,
        limits: ContainerSetup,
        own: list[str],
        asked: float | None = None,
    ) -> Slot:
        """An unused container for one run: a waiting spare if there is one whose waiter is
        ready (`_warm.probe`; one that is not is removed and the next tried), else a new
        container created with ``own`` as its process, for the caller to start. ``asked``: when
        the run was called for (`time.monotonic`; default now), for its key's demand."""
        key = (image, limits)
        taken = _call_keys.get()
        if taken is not None:  # inside a caller's `call`: its row is counted under this key
            taken.append(key)
        with self.lock:
            now = time.monotonic()
            self.demand.setdefault(key, _Demand()).take(now, now if asked is None else asked)
            slot = self._claim(key)
            if key not in self.spares:
                self.ready.notify_all()  # a refill waiting for the row's end starts now (`_refill`)
        while slot is not None and not self._usable(slot):
            self.remove_later(slot)  # never used: it died, was tampered with, or its stream broke
            with self.lock:
                slot = self._take(key) if key in self.spares else None
        if slot is None:
            slot = self._retuned(client, image, limits)
        warm = slot is not None
        try:
            if slot is None:
                slot = self._create(client, image, limits, own)
        except BaseException:
            self._done(key)
            raise
        slot.key = key
        if warm:  # else the refill waits for this run's end (`remove`): a burst runs first
            self._refill_later(client, image, limits)
        return slot

    @staticmethod
    def _usable(slot: Slot) -> bool:
        """A spare not past its idle time whose waiter answers ready (`_warm.probe`)."""
        fresh = time.monotonic() - slot.born <= _IDLE
        return fresh and slot.attached is not None and _warm.probe(slot.attached)

    def _retuned(self, client: DockerClient, image: str, limits: ContainerSetup) -> Slot | None:
        """A waiting spare of ``image`` set to ``limits``, or None: a run whose CPUs, memory,
        pids or timeout no spare has takes one that differs only in those, and the engine
        changes its cgroup limits before the program is sent (`retune`). The spare is taken
        from its own key, whose refill starts more of it when its runs come back. One that
        cannot be changed (the engine refuses, or says it kept other values) is removed, never
        used: the run starts cold with its own limits."""
        runtime_of = (limits.engine, limits.isolation)
        with self.lock:
            if runtime_of in self.fixed:
                return None
            found = _retunable(self.spares, image, limits, time.monotonic())
            if found is None:
                return None
            slot = self._take(*found)
        if self._usable(slot):
            done = retune(client, slot, limits)
            if done:
                return slot
            if done is None:
                with self.lock:
                    self.fixed.add(runtime_of)
        self.remove_later(slot)
        return None

    def prestart(self, client: DockerClient, image: str, limits: ContainerSetup) -> None:
        """Start a spare of ``image`` and ``limits`` now, in the background: an image just built
        has none, and its first run is on its way. It counts as starting before this returns, so
        that run waits for it (`_claim`) rather than starting a container of its own."""
        key = (image, keyed(client, limits))
        with self.lock:
            if (
                self.closing
                or image in self.no_waiter
                or key in self.spares
                or key in self.starting
            ):
                return
            self.starting[key] = 1
        self._background(self._start_one, client, key)

    def _start_one(self, client: DockerClient, key: _Key) -> None:
        """Start a spare of ``key`` counted as starting by the caller (`prestart`); kept, then no
        longer counted, so a run waiting for it finds it."""
        try:
            with contextlib.suppress(Exception):  # a spare is an optimisation: never an error
                self._keep(key, self._start(client, *key))
        finally:
            with self.lock:
                self.starting[key] -= 1
                if not self.starting[key]:
                    del self.starting[key]
                self.ready.notify_all()

    def _refill_later(self, client: DockerClient, image: str, limits: ContainerSetup) -> None:
        """Start the key's refill thread, unless it runs."""
        key = (image, limits)
        with self.lock:
            if self.closing or key in self.refilling:
                return
            self.refilling.add(key)
        self._background(self._refill, client, image, limits)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Around a whole run as its caller sees it (`Sandbox.execute`): while it is prepared, a
        refill with spares left waits for it (`_Demand.hold`); when it returns, the next run of
        the key its container was taken under (`acquire` notes it: the engine is part of it) is
        part of its row if called within `_IN_A_ROW` s (`_Demand.returned`). Our own work between
        two containers is no gap in a row. Nothing here can fail before the count goes down: a
        count left up would hold every refill (`_preparing`) for good."""
        taken: list[_Key] = []
        token = _call_keys.set(taken)
        with self.lock:
            self.called += 1
        try:
            yield
        finally:
            _call_keys.reset(token)
            with self.lock:
                self.called -= 1
                demand = self.demand.get(taken[-1]) if taken else None
                if demand is not None:
                    demand.returned(time.monotonic())
                self.ready.notify_all()

    def _done(self, key: _Key) -> None:
        with self.lock:
            self.demand[key].done(time.monotonic())
            self.ready.notify_all()  # a refill waiting for the run's end looks

    def hand_over(self, client: DockerClient, slot: Slot) -> None:
        """``slot`` stays its holder's past the run it was taken for (a session's container,
        `_session`): for the key's demand the run is over, and its spares are topped up. It
        stays live (`close` removes it) until `remove`."""
        key, slot.key = slot.key, None
        if key is not None:
            self._done(key)
            self._refill_later(client, *key)

    def release(self, client: DockerClient, slot: Slot, *, now: bool) -> None:
        """A run is over with ``slot``: remove it (``now``, or off the caller's path) and top up
        the key's spares."""
        key, slot.key = slot.key, None
        if key is not None:
            self._done(key)
        if now:
            self.remove(slot)
        else:
            self.remove_later(slot)
        if key is not None:
            self._refill_later(client, *key)

    def remove(self, slot: Slot) -> None:
        from docker.errors import APIError, NotFound

        if slot.attached is not None:
            slot.attached.close()
        try:
            slot.container.remove(force=True)
        except NotFound:
            pass
        except APIError:
            # auto_remove raced us: "removal already in progress" (409), or "could not kill
            # running container ... is not running" (500, the process had just exited; seen in
            # CI). Wait for the engine's own removal, then remove what is left ourselves.
            if not wait_gone(slot.container, time.monotonic() + _GONE_WAIT):
                with contextlib.suppress(NotFound):
                    slot.container.remove(force=True)
        finally:
            if slot.limits.isolation == "gvisor":  # a failed start can leave its sandbox running
                purge(slot.container.id or "")
            shutil.rmtree(slot.work, ignore_errors=True)
            with self.lock:
                self.live.pop(slot.container.id or "", None)

    def remove_later(self, slot: Slot) -> None:
        """Remove off the caller's path (a clean run's results are ready before teardown ends)."""
        self._background(self.remove, slot)

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Path]:
        """A private folder for one run's staging (inputs, program, outputs), removed off the
        caller's path after a run that returned (deleting it is a good part of a warm run's
        time), and `quiesce` (so kernel exit) still waits for it.
        After a failure, at once: the space is back before the error is (a full disk's run,
        retried at once, found the half-staged folder still there)."""
        folder = Path(tempfile.mkdtemp(prefix=temp_prefix("run")))
        try:
            yield folder
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._background(shutil.rmtree, folder, True)

    def quiesce(self) -> None:
        """Wait for background starts and removals: afterwards the spares are up and waiting, and
        used containers are gone. A job may start another while it is waited for (a removal
        after a refill's eviction...): it is counted before the first one ends."""
        with self.lock:
            self.ready.wait_for(lambda: not self.jobs)

    def settle(self) -> None:
        """`quiesce`, then remove the spares: afterwards this process has no container left (tests
        check that; so does kernel exit)."""
        self.quiesce()
        with self.lock:
            spares = [
                self._take(key) for key in list(self.spares) for _ in range(len(self.spares[key]))
            ]
            for demand in self.demand.values():  # a clean slate
                demand.forget()
        for slot in spares:
            self.remove(slot)

    def close(self) -> None:
        """No container of this pool outlives it (kernel exit, the end of a test's pool):
        nothing new starts, then `settle`, then what is left goes."""
        with self.lock:
            self.closing = True
        self.settle()
        with self.lock:
            left = list(self.live.values())
        for slot in left:
            self.remove(slot)


_default: Default[Pool] = Default(Pool)
current = _default.get
"""The process's pool (made on first use)."""
install = _default.install
"""Put a pool in the current one's place (a test's fresh one); returns the one it replaces."""


def acquire(
    client: DockerClient,
    image: str,
    limits: ContainerSetup,
    own: list[str],
    asked: float | None = None,
) -> Slot:
    """`Pool.acquire` of the current pool."""
    return current().acquire(client, image, limits, own, asked)


def prestart(client: DockerClient, image: str, limits: ContainerSetup) -> None:
    """`Pool.prestart` of the current pool."""
    current().prestart(client, image, limits)


def call() -> contextlib.AbstractContextManager[None]:
    """`Pool.call` of the current pool."""
    return current().call()


def hand_over(client: DockerClient, slot: Slot) -> None:
    """`Pool.hand_over` of the current pool."""
    current().hand_over(client, slot)


def create_kept(
    client: DockerClient,
    image: str,
    limits: ContainerSetup,
    own: list[str],
    kept: Mapping[str, str],
) -> Slot:
    """`Pool._create` of a kept session's container (`_kept`), for the caller to start."""
    return current()._create(client, image, limits, own, kept)


def release(client: DockerClient, slot: Slot, *, now: bool) -> None:
    """`Pool.release` of the current pool."""
    current().release(client, slot, now=now)


def remove(slot: Slot) -> None:
    """`Pool.remove` of the current pool."""
    current().remove(slot)


def remove_later(slot: Slot) -> None:
    """`Pool.remove_later` of the current pool."""
    current().remove_later(slot)


def scratch() -> contextlib.AbstractContextManager[Path]:
    """`Pool.scratch` of the current pool."""
    return current().scratch()


def quiesce() -> None:
    """`Pool.quiesce` of the current pool."""
    current().quiesce()


def settle() -> None:
    """`Pool.settle` of the current pool."""
    current().settle()


@atexit.register
def _shutdown() -> None:
    """Kernel exit: no container of the process's pool outlives the process."""
    current().close()
