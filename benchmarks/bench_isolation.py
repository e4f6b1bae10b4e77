"""What each isolation level costs: a run and a fan-out under runc, gVisor's runsc, and runc
under rootless Podman.

    .venv/bin/python benchmarks/bench_isolation.py [--rounds N] [--pause S] [--podman-user U]

For each level (`jupyter_sandbox.sandbox._isolation`), against ``docker run --rm`` of the same
one-line program with the same confinement under the same runtime (the level's baseline): a
warm ``create().run`` spaced like cells (the spare started after the previous run is up), a
cold one (no spare waiting), and a fan-out of 16 runs through ``tool(sandbox,
concurrency=16)`` and ``asyncio.gather`` in ``orchestrate``, against 16 parallel CLI runs. The
last table puts gVisor's time for each row over runc's. An allow-listed network
(``network=["pypi.org"]``: runs on an internal network behind a Squid proxy, `_egress`) has a
table of its own against the same runs with ``network="none"`` and ``"bridge"``: warm, cold,
and the first run of a new allow-list (its proxy and network started); ``--allow-list-only``
runs only that table. With ``--podman-user U`` (root runs
the benchmark; U's ``podman system service`` listens on ``/run/user/<uid>/podman/podman.sock``)
the same rows run on rootless Podman, against ``podman run --rm`` run as U (through
``runuser``), and a last table puts Podman's time over Docker's. Rows take turns each round
(medians), so load that comes and goes hits them alike. A script, not a test: numbers depend on the
machine.
"""

from __future__ import annotations

import argparse
import os
import pwd
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from _timing import measure_prepared, print_table
from bench_sandbox import cold

from jupyter_sandbox import Sandbox, create, orchestrate, tool
from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE, _client, _egress, _engine
from jupyter_sandbox.sandbox._isolation import RUNTIMES, Isolation
from jupyter_sandbox.sandbox._pool import quiesce, settle

FAN_OUT = 16
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


def spaced(pause: float) -> Callable[[], None]:
    """Like cells: background starts and removals done, then a pause to read the output."""

    def prepare() -> None:
        quiesce()
        time.sleep(pause)

    return prepare


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


def level_rows(level: Isolation, pause: float, podman_user: str | None = None) -> list[Row]:
    """The rows of one level, its CLI baseline first; on rootless Podman as ``podman_user``
    when given (``level`` then only names the rows: runc, Podman's default runtime)."""
    runtime = RUNTIMES[level]
    engine_cli = podman_cli(podman_user) if podman_user else ["docker"]
    cli_command = [
        *engine_cli,
        "run",
        "--rm",
        *CONFINED,
        *([f"--runtime={runtime}"] if runtime and not podman_user else []),
        DEFAULT_BASE_IMAGE,
        "python3",
        "-c",
        "print(21 * 2)",
    ]
    name = "podman" if podman_user else level
    if podman_user:
        level = "container"
    sandbox = create(
        "bench", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, isolation=level
    )
    double = tool(sandbox, name="double", concurrency=FAN_OUT)

    def cli() -> None:
        subprocess.run(cli_command, check=True, capture_output=True)

    def cli_parallel() -> None:
        with ThreadPoolExecutor(FAN_OUT) as pool:
            list(pool.map(lambda _: cli(), range(FAN_OUT)))

    def run() -> None:
        assert sandbox.run(x=21) == 42

    def gather() -> None:
        assert orchestrate(GATHER, tools=[double]).value == [2 * i for i in range(FAN_OUT)]

    word = engine_cli[-1]
    return [
        (f"{name}: {word} run --rm CLI", quiesce, cli),
        (f"{name}: warm create().run, {pause:g} s apart", spaced(pause), run),
        (f"{name}: cold create().run (no spare)", *cold(level)),
        (f"{name}: {FAN_OUT} parallel {word} run CLI", quiesce, cli_parallel),
        (f"{name}: fan-out of {FAN_OUT}, tool + gather", spaced(pause), gather),
    ]


ALLOW = ["pypi.org"]


def allow_rows(pause: float) -> list[Row]:
    """Runs with an allow-list against the same runs with no network (the first row)."""
    offline = create("bench", code="y = x * 2", inputs={"x": int}, outputs={"y": int})
    bridged = create(
        "bench-bridge", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, network="bridge"
    )
    allowed = create(
        "bench-allow", code="y = x * 2", inputs={"x": int}, outputs={"y": int}, network=ALLOW
    )
    fresh = [allowed]
    lists = iter(range(10**6))

    def new_list() -> None:
        quiesce()
        engine = _client.client()
        for key, egress in list(_egress._egresses.items()):  # the previous round's list
            if egress.destinations == fresh[0].network and fresh[0] is not allowed:
                egress.close(engine)
                del _egress._egresses[key]
        fresh[0] = create(
            "bench-allow-new",
            code="y = x * 2",
            inputs={"x": int},
            outputs={"y": int},
            network=[f"bench{next(lists)}.example"],
        )  # a list no run had: its proxy and network start in the timed run

    def runner(sandbox: Sandbox) -> Callable[[], None]:
        def run() -> None:
            assert sandbox.run(x=21) == 42

        return run

    return [
        (f"network none: warm create().run, {pause:g} s apart", spaced(pause), runner(offline)),
        (f"network bridge: warm create().run, {pause:g} s apart", spaced(pause), runner(bridged)),
        (f"allow-list: warm create().run, {pause:g} s apart", spaced(pause), runner(allowed)),
        ("network none: cold create().run (no spare)", *cold()),
        ("network bridge: cold create().run (no spare)", *cold(network="bridge")),
        ("allow-list: cold create().run (no spare)", *cold(network=ALLOW)),
        ("allow-list: first run of a new list (proxy start)", new_list, lambda: fresh[0].run(x=21)),
    ]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--pause", type=float, default=1.0, help="seconds between runs spaced like cells"
    )
    parser.add_argument(
        "--allow-list-only", action="store_true", help="only the allow-listed network's table"
    )
    parser.add_argument(
        "--podman-user",
        metavar="USER",
        help="also run every row on USER's rootless Podman service (its socket in /run/user)",
    )
    args = parser.parse_args()

    names: list[str] = [] if args.allow_list_only else list(LEVELS)
    _engine.choose("docker")
    levels = () if args.allow_list_only else LEVELS
    rows = [row for level in levels for row in level_rows(level, args.pause)]
    if args.podman_user:
        uid = pwd.getpwnam(args.podman_user).pw_uid
        os.environ["CONTAINER_HOST"] = f"unix:///run/user/{uid}/podman/podman.sock"
        _engine.choose("podman")
        podman = _client.engine_of(_client.client())
        # rootless Podman on cgroup v1 drops every limit (so does `podman run`): accepted here
        os.environ[_engine.UNENFORCED_ENV] = ",".join(podman.unenforced)
        print(podman.describe())
        _engine.choose("docker")
        rows += on_engine("podman", level_rows("container", args.pause, args.podman_user))
        names.append("podman")
    allow = allow_rows(args.pause)
    load_before = _load()
    times = dict(measure_prepared(rows + allow, args.rounds))
    for engine in ("docker", "podman") if args.podman_user else ("docker",):
        on_engine(engine, [("", nothing, settle)])[0][2]()
    print(f"median of {args.rounds} interleaved rounds; load before {load_before}, after {_load()}")
    per_level = len(rows) // max(len(names), 1)
    for at, level in enumerate(names):
        own = [(label, times[label]) for label, _, _ in rows[at * per_level : (at + 1) * per_level]]
        print_table(
            f"{level} (ratios against its own CLI run; fan-out rows: all 16)", own, unit="ms"
        )
        for label, seconds in own[-2:]:
            print(f"  {label:42} {FAN_OUT / seconds:6.2f} containers/s")
    print_table(
        "allow-listed network (ratios against the same warm run with network none)",
        [(label, times[label]) for label, _, _ in allow],
        unit="ms",
    )
    if args.allow_list_only:
        return
    print(f"\n{'gVisor over runc, same row':44} {'runc ms':>12} {'gVisor ms':>12} {'ratio':>8}")
    for (label, _, _), (gvisor, _, _) in zip(
        rows[:per_level], rows[per_level : 2 * per_level], strict=True
    ):
        what = label.split(": ", 1)[1]
        runc_s, gvisor_s = times[label], times[gvisor]
        print(f"{what:44} {runc_s * 1e3:12.1f} {gvisor_s * 1e3:12.1f} {gvisor_s / runc_s:7.2f}x")
    if args.podman_user:
        print(f"\n{'rootless Podman over Docker, same row':44} {'Docker ms':>12} {'Podman ms':>12}")
        for (label, _, _), (podman_row, _, _) in zip(
            rows[:per_level], rows[2 * per_level :], strict=True
        ):
            what = label.split(": ", 1)[1]
            docker_s, podman_s = times[label], times[podman_row]
            ratio = podman_s / docker_s
            print(f"{what:44} {docker_s * 1e3:12.1f} {podman_s * 1e3:12.1f} {ratio:7.2f}x")


if __name__ == "__main__":
    main()
