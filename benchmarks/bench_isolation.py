"""What each isolation level costs: a run and a fan-out under runc, gVisor's runsc, and runc
under rootless Podman.

    .venv/bin/python benchmarks/bench_isolation.py [--rounds N] [--pause S] [--podman-user U]
    .venv/bin/python benchmarks/bench_isolation.py --profile [--rounds N]

For each level (`jupyter_sandbox.sandbox._isolation`), against the plain ``docker run --rm`` of
``print(42)`` under the same runtime (the level's baseline), and the same with the confinement
a sandbox gets: a warm ``create().run()`` of ``print(42)`` spaced like cells (the spare
started after the previous run is up) and back to back (mean of 4 runs in a row, with limits
of their own: as when a cell's loop runs again, the pool keeps 4 spares), a warm run with an
input and an output (``y = x * 2``), a cold one (no spare waiting), the first run of an
environment image just built (each round a new image: built, and its first spare started as
`Sandbox` does after a build, untimed), and, against 16 parallel plain CLI runs, a fan-out of
16 runs through ``tool(sandbox, concurrency=16)`` and ``asyncio.gather`` in ``orchestrate``,
with spares waiting and with none. The last table puts gVisor's time for each row over runc's.
An allow-listed network (``network=["pypi.org"]``: runs on an internal network behind a Squid
proxy, `_egress`) has a table of its own against the same runs with ``network="none"`` and
``"bridge"``: warm, cold, and the first run of a new allow-list (its proxy and network
started); ``--allow-list-only`` runs only that table.
``--profile`` prints instead where a warm run of ``print(42)`` spends its time (medians).
With ``--podman-user U`` (root runs the benchmark; U's ``podman system service`` listens on
``/run/user/<uid>/podman/podman.sock``) the same rows run on rootless Podman, against
``podman run --rm`` run as U (through ``runuser``), and a last table puts Podman's time over
Docker's. Rows take turns each round (medians), so load that comes and goes hits them alike.
A script, not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import itertools
import os
import pwd
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _timing import measure_prepared, print_table
from bench_sandbox import cold

from jupyter_sandbox import Sandbox, create, orchestrate, tool
from jupyter_sandbox._shared._events import ignore
from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE, _client, _egress, _engine, _pool
from jupyter_sandbox.sandbox._image import ensure_image
from jupyter_sandbox.sandbox._isolation import RUNTIMES, Isolation
from jupyter_sandbox.sandbox._pool import prestart, quiesce, settle

FAN_OUT = 16
IN_A_ROW = 4
LEVELS: tuple[Isolation, ...] = ("container", "gvisor")
CONFINED = [
    "--network=none",
    "--user=1000:1000",
    "--read-only",
    "--tmpfs=/tmp:rw,nosuid,nodev,size=256m",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--pids-limit=256",
    "--memory=1g",
    "--cpus=1",
]
GATHER = f"import asyncio\nawait asyncio.gather(*[double(i) for i in range({FAN_OUT})])"


def nothing() -> None:
    pass


def warm(sandbox: Any, spares: int, pause: float, run: Callable[[], object]) -> Callable[[], None]:
    """A prepare that leaves ``spares`` spares of ``sandbox`` waiting (runs it untimed first
    if a row before took them, or `settle` removed them), then pauses ``pause`` s like
    cells: every sandbox of these rows has limits of its own (its timeout), so rows never
    take each other's spares."""

    def prepare() -> None:
        quiesce()
        if _waiting(sandbox) < spares:
            if spares > 1:
                settle()  # room in the pool, and the demand of this row alone
            run()
            quiesce()
        time.sleep(pause)

    return prepare


def _waiting(sandbox: Any) -> int:
    """Spares waiting for ``sandbox``'s runs (its timeout and level are its own)."""
    return sum(
        len(slots)
        for (_, limits), slots in list(_pool.current().spares.items())
        if limits.timeout == sandbox.timeout and limits.isolation == sandbox.isolation
    )


Row = tuple[str, Callable[[], object], Callable[[], object]]


def podman_cli(user: str) -> list[str]:
    """``podman`` as ``user`` (root runs the benchmark), with that user's runtime folder."""
    uid = pwd.getpwnam(user).pw_uid
    home = pwd.getpwnam(user).pw_dir
    env = [f"XDG_RUNTIME_DIR=/run/user/{uid}", f"HOME={home}", "PATH=/usr/bin:/bin"]
    return ["runuser", "-u", user, "--", "env", "-i", *env, "podman"]


def on_engine(engine: str, rows: list[Row]) -> list[Row]:
    """``rows`` with every prepare and run made on ``engine`` (`_engine.choose`)."""

    def switched(fn: Callable[[], object]) -> Callable[[], object]:
        def call() -> object:
            _engine.choose(engine)
            try:
                return fn()
            finally:
                _engine.choose("docker")

        return call

    return [(label, switched(prepare), switched(run)) for label, prepare, run in rows]


def level_rows(
    level: Isolation, pause: float, podman_user: str | None = None
) -> tuple[list[Row], list[Row]]:
    """The rows of one level: one run, its plain CLI baseline first, and the fan-out, its 16
    parallel plain CLI runs first; on rootless Podman as ``podman_user`` when given (``level``
    then only names the rows: runc, Podman's default runtime)."""
    runtime = RUNTIMES[level]
    engine_cli = podman_cli(podman_user) if podman_user else ["docker"]
    on_runtime = [f"--runtime={runtime}"] if runtime and not podman_user else []
    program = [DEFAULT_BASE_IMAGE, "python3", "-c", "print(42)"]
    plain_command = [*engine_cli, "run", "--rm", *on_runtime, *program]
    confined_command = [*engine_cli, "run", "--rm", *CONFINED, *on_runtime, *program]
    name = "podman" if podman_user else level
    if podman_user:
        level = "container"
    sandbox = create(
        "bench", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, isolation=level
    )
    hello = create("hello", code="print(42)", isolation=level, timeout=601)
    row = create("hello-row", code="print(42)", isolation=level, timeout=301)
    wide = create(
        "wide",
        code="y = x * 2",
        inputs={"x": int},
        outputs={"y": int},
        isolation=level,
        timeout=603,
    )
    double = tool(wide, name="double", concurrency=FAN_OUT)

    def cli(command: list[str]) -> Callable[[], None]:
        return lambda: subprocess.run(command, check=True, capture_output=True)

    def cli_parallel() -> None:
        with ThreadPoolExecutor(FAN_OUT) as pool:
            list(pool.map(lambda _: cli(plain_command)(), range(FAN_OUT)))

    def run() -> None:
        assert sandbox.run(x=21) == 42

    def run_hello() -> None:
        assert hello.execute({}).stdout == "42\n"

    def back_to_back() -> None:
        for _ in range(IN_A_ROW):
            assert row.execute({}).stdout == "42\n"

    def gather() -> None:
        assert orchestrate(GATHER, tools=[double]).value == [2 * i for i in range(FAN_OUT)]

    word = engine_cli[-1]
    runs = [
        (f"{name}: plain {word} run --rm CLI", quiesce, cli(plain_command)),
        (f"{name}: {word} run --rm, confined", quiesce, cli(confined_command)),
        (f"{name}: warm print(42), {pause:g} s apart", warm(hello, 1, pause, run_hello), run_hello),
        (
            f"{name}: warm print(42), back to back /{IN_A_ROW}",
            warm(row, 4, 0, back_to_back),
            back_to_back,
        ),
        (f"{name}: warm y = x * 2, {pause:g} s apart", warm(sandbox, 1, pause, run), run),
        (f"{name}: cold y = x * 2 (no spare)", *cold(level)),
        (f"{name}: first print(42) after a build", *first_after_build(level)),
    ]
    fans = [
        (f"{name}: {FAN_OUT} parallel plain {word} run CLI", quiesce, cli_parallel),
        (
            f"{name}: fan-out of {FAN_OUT}, spares waiting",
            warm(wide, FAN_OUT, pause, gather),
            gather,
        ),
        (f"{name}: fan-out of {FAN_OUT}, no spare", settle, gather),
    ]
    return runs, fans


def first_after_build(level: Isolation) -> tuple[Callable[[], None], Callable[[], None]]:
    """(prepare, run): each round an environment image nobody built before (one ``echo``
    step on the base), built and its first spare started as `Sandbox` does after a build
    (`prestart`), untimed; then its first run. The images are removed at the end."""
    rounds = itertools.count()
    sandbox = [create("built", code="print(42)")]
    built: list[str] = []

    def prepare() -> None:
        quiesce()
        step = f"echo bench-{os.getpid()}-{level}-{next(rounds)}"
        sandbox[0] = create("built", code="print(42)", additional_commands=[step], isolation=level)
        docker = _client.client()
        image, _, info = ensure_image(docker, sandbox[0].image_spec, ignore)
        assert info is not None
        assert info.error is None
        assert not info.cached
        built.append(image)
        prestart(docker, image, sandbox[0]._limits())
        quiesce()  # its spare is up

    def run_first() -> None:
        assert sandbox[0].execute({}).stdout == "42\n"

    _built.append(built)
    return prepare, run_first


_built: list[list[str]] = []
"""The images `first_after_build` built, removed at the end."""


ALLOW = ["pypi.org"]


def allow_rows(pause: float) -> list[Row]:
    """Runs with an allow-list against the same runs with no network (the first row)."""

    timeouts = itertools.count(2000)

    def sandbox(name: str, network: str | list[str]) -> Sandbox:
        """Each with a timeout of its own: `warm` counts a row's spares by it."""
        return create(
            name,
            code="y = x * 2",
            inputs={"x": int},
            outputs={"y": int},
            network=network,
            timeout=next(timeouts),
        )

    offline = sandbox("bench", "none")
    bridged = sandbox("bench-bridge", "bridge")
    allowed = sandbox("bench-allow", ALLOW)
    fresh = [allowed]
    lists = iter(range(10**6))

    def new_list() -> None:
        quiesce()
        engine = _client.client()
        for key, egress in list(_egress._egresses.items()):  # the previous round's list
            if egress.destinations == fresh[0].network and fresh[0] is not allowed:
                egress.close(engine)
                del _egress._egresses[key]
        # a list no run had: its proxy and network start in the timed run
        fresh[0] = sandbox("bench-allow-new", [f"bench{next(lists)}.example"])

    def runner(box: Sandbox) -> Callable[[], None]:
        def run() -> None:
            assert box.run(x=21) == 42

        return run

    return [
        (
            f"network none: warm, {pause:g} s apart",
            warm(offline, 1, pause, runner(offline)),
            runner(offline),
        ),
        (
            f"network bridge: warm, {pause:g} s apart",
            warm(bridged, 1, pause, runner(bridged)),
            runner(bridged),
        ),
        (
            f"allow-list: warm, {pause:g} s apart",
            warm(allowed, 1, pause, runner(allowed)),
            runner(allowed),
        ),
        ("network none: cold (no spare)", *cold()),
        ("network bridge: cold (no spare)", *cold(network="bridge")),
        ("allow-list: cold (no spare)", *cold(network=ALLOW)),
        ("allow-list: first run of a new list (proxy start)", new_list, lambda: fresh[0].run(x=21)),
    ]


def remove_built() -> None:
    docker = _client.client()
    for image in (image for images in _built for image in images):
        docker.images.remove(image, force=True)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _ratios(title: str, rows: list[Row], times: dict[str, float], per: int) -> None:
    """One table per level beside another: the second level's time for each row over the
    first's (``rows``: the first level's rows, then the second's)."""
    first, second = title.split(" over ")
    print(f"\n{title + ', same row':44} {first + ' ms':>12} {second + ' ms':>12} {'ratio':>8}")
    for (label, _, _), (other, _, _) in zip(rows[:per], rows[per : 2 * per], strict=True):
        what = label.split(": ", 1)[1]
        mine, theirs = times[label], times[other]
        print(f"{what:44} {mine * 1e3:12.1f} {theirs * 1e3:12.1f} {theirs / mine:7.2f}x")


def profile(rounds: int, level: Isolation) -> None:
    """Where a warm run of ``print(42)`` spends its time: each step's median over ``rounds``
    runs, each after its spare is up. The steps are timed where the engine's functions begin
    and end (wrapped here), and inside the container by the program itself (the host and the
    container read the same clock under runc; gVisor's follows it)."""
    from jupyter_sandbox.sandbox import _attach, _container, _pool

    marks: dict[str, float] = {}
    removals: list[float] = []

    def wrap(owner: object, name: str, before: str | None, after: str | None) -> None:
        function = getattr(owner, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            if before:
                marks[before] = time.time()
            try:
                return function(*args, **kwargs)
            finally:
                if after:
                    marks[after] = time.time()

        setattr(owner, name, wrapped)

    wrap(_pool, "acquire", "acquire", "acquired")
    wrap(_container, "_stage", None, "staged")
    wrap(_attach.Attached, "send", None, "sent")
    wrap(_container, "_wait", None, "waited")
    pool = _pool.current()  # its removals off the run's path call its own `remove`
    remove = pool.remove

    def timed_remove(slot: object) -> None:
        start = time.perf_counter()
        remove(slot)  # type: ignore[arg-type]
        removals.append(time.perf_counter() - start)

    pool.remove = timed_remove  # type: ignore[method-assign]
    code = "import time\na = time.time()\nprint(42)\nb = time.time()\nprint(a, b)"
    sandbox = create("profile", code=code, isolation=level)
    steps: dict[str, list[float]] = {}
    sandbox.run()
    for _ in range(rounds):
        quiesce()
        time.sleep(0.2)
        marks.clear()
        marks["asked"] = time.time()
        stdout = sandbox.execute({}).stdout
        marks["returned"] = time.time()
        first, times = stdout.splitlines()
        assert first == "42"
        marks["begun"], marks["ended"] = map(float, times.split())
        for step, (start, end) in PROFILE_STEPS.items():
            steps.setdefault(step, []).append(marks[end] - marks[start])
    quiesce()
    settle()
    print(f"\nwhere a warm print(42) spends its time ({level}; median of {rounds} runs)")
    for step, samples in steps.items():
        print(f"  {step:58} {statistics.median(samples) * 1e3:8.2f} ms")
    print(f"  {'removal of the used container, off the path':58} ", end="")
    print(f"{statistics.median(removals) * 1e3:8.2f} ms")


PROFILE_STEPS = {
    "host: bind inputs, read secrets, stage files": ("asked", "acquire"),
    "probe: the spare's stream quiet, its waiter's READY": ("acquire", "acquired"),
    "files linked into the spare's mounts": ("acquired", "staged"),
    "attach write: the program's header": ("staged", "sent"),
    "program start: the waiter reads, compiles, runs": ("sent", "begun"),
    "program: print(42)": ("begun", "ended"),
    "output read: status line, tar, stderr's marker": ("ended", "waited"),
    "host after: streams closed, outputs, record": ("waited", "returned"),
    "the whole run, as its caller sees it": ("asked", "returned"),
}
"""Each step of a warm run and the marks (`profile`) it lies between."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between runs spaced like cells"
    )
    parser.add_argument(
        "--podman-user",
        metavar="USER",
        help="also run every row on USER's rootless Podman service (its socket in /run/user)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="where a warm run spends its time, per level"
    )
    parser.add_argument(
        "--allow-list-only", action="store_true", help="only the allow-listed network's table"
    )
    args = parser.parse_args()

    _engine.choose("docker")
    if args.profile:
        for level in LEVELS:
            profile(args.rounds, level)
        return
    levels = () if args.allow_list_only else LEVELS
    names: list[str] = list(levels)
    tables = [level_rows(level, args.pause) for level in levels]
    if args.podman_user:
        uid = pwd.getpwnam(args.podman_user).pw_uid
        os.environ["CONTAINER_HOST"] = f"unix:///run/user/{uid}/podman/podman.sock"
        _engine.choose("podman")
        podman = _client.engine_of(_client.client())
        # rootless Podman on cgroup v1 drops every limit (so does `podman run`): accepted here
        os.environ[_engine.UNENFORCED_ENV] = ",".join(podman.unenforced)
        print(podman.describe())
        _engine.choose("docker")
        runs, fans = level_rows("container", args.pause, args.podman_user)
        tables.append((on_engine("podman", runs), on_engine("podman", fans)))
        names.append("podman")
    load_before = _load()
    rows = [row for runs, fans in tables for row in (*runs, *fans)]
    allow = allow_rows(args.pause)
    try:
        times = dict(measure_prepared(rows + allow, args.rounds))
    finally:
        for engine in ("docker", "podman") if args.podman_user else ("docker",):
            on_engine(engine, [("", nothing, settle)])[0][2]()
        remove_built()
    for label, _, _ in rows:
        if "back to back" in label:
            times[label] /= IN_A_ROW
    print(f"median of {args.rounds} interleaved rounds; load before {load_before}, after {_load()}")
    for level, (runs, fans) in zip(names, tables, strict=True):
        own = [(label, times[label]) for label, _, _ in runs]
        print_table(f"{level}: one run (ratios against the plain CLI run)", own, unit="ms")
        fanned = [(label, times[label]) for label, _, _ in fans]
        print_table(
            f"{level}: fan-out of {FAN_OUT} (all 16; against 16 CLI runs)", fanned, unit="s"
        )
        for label, seconds in fanned:
            print(f"  {label:42} {FAN_OUT / seconds:6.2f} containers/s")
    print_table(
        "allow-listed network (ratios against the same warm run with network none)",
        [(label, times[label]) for label, _, _ in allow],
        unit="ms",
    )
    if args.allow_list_only:
        return
    per_level = len(rows) // len(names)
    _ratios("runc over gVisor", rows, times, per_level)
    if args.podman_user:
        _ratios("Docker over Podman", [*rows[:per_level], *rows[2 * per_level :]], times, per_level)


if __name__ == "__main__":
    main()
