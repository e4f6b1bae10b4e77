"""A warm run: the spare's interpreter, started ahead, runs the program as a plain
``python3 FILE`` would, and loads nothing the program did not ask for.

Each test runs the same program cold (no spare: ``python3`` started for it, the container's
own process) and warm (the spare's waiter, `_warm`) and compares what the program sees.
Everything here is real: the engine, the containers, the interpreter in them.
"""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox import NonZeroExit, UnusableImage, create
from jupyter_sandbox.sandbox import _pool

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

_SEES = """\
import sys
print(sorted(sys.modules))
print(sys.argv, sys.path[0], sys.stdin.read() == '', sys.flags.dont_write_bytecode)
"""
"""What a program sees at its start: the modules loaded, its argv, path and stdin."""
_MAIN = """\
print(sorted(globals()), __name__, __file__, __doc__, __package__, __spec__, __cached__)
print(type(__loader__).__name__, __loader__.name, __loader__.path)
"""
"""What a script sees of ``__main__`` (verbatim mode: the auto-IO runner runs the cell in a
namespace of its own)."""


def _cold_then_warm(sandbox: Any, inputs: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """(the run with no spare waiting, the run in the spare it left)."""
    _pool.settle()
    cold = _run(sandbox, inputs)
    _pool.quiesce()
    assert _pool.current().spares, "no spare waited for the warm run"
    return cold, _run(sandbox, inputs)


def _run(sandbox: Any, inputs: dict[str, Any] | None) -> Any:
    try:
        return sandbox.execute(inputs or {})
    except NonZeroExit as error:
        return error


@pytest.mark.parametrize("auto_io", [False, True], ids=["verbatim", "auto-io"])
def test_a_warm_program_sees_what_a_plain_start_gives_it_and_no_more(auto_io):
    """The modules a plain ``python3 /opt/jupyter-sandbox/main.py`` loads (and the runner's,
    in auto-IO mode), ``__main__``'s names, ``sys.argv``, ``sys.path[0]``, an empty stdin:
    the same warm as cold. The waiter imported nothing of its own."""
    sandbox = create("sees", code=_SEES + ("" if auto_io else _MAIN), auto_io=auto_io)
    cold, warm = _cold_then_warm(sandbox)
    assert warm.stdout == cold.stdout
    modules = eval(cold.stdout.splitlines()[0])
    assert "json" not in modules and "runpy" not in modules and "select" not in modules
    assert "/opt/jupyter-sandbox" in cold.stdout


def test_an_uncaught_exception_and_an_exit_status_look_the_same_warm():
    """An uncaught exception is printed from the program's own frames (none of the waiter's)
    and exits 1; ``SystemExit(3)`` exits 3."""
    failing = create("fails", code="x = 1\nraise ValueError('no')", auto_io=False)
    cold, warm = _cold_then_warm(failing)
    assert isinstance(cold, NonZeroExit) and isinstance(warm, NonZeroExit)
    assert (
        (warm.exit_code, warm.stderr_tail)
        == (cold.exit_code, cold.stderr_tail)
        == (
            1,
            'Traceback (most recent call last):\n  File "/opt/jupyter-sandbox/main.py", line 2, '
            "in <module>\n    raise ValueError('no')\nValueError: no",
        )
    )
    exiting = create("exits", code="import sys\nsys.exit(3)", auto_io=False)
    cold, warm = _cold_then_warm(exiting)
    assert cold.exit_code == warm.exit_code == 3


def test_a_variable_read_at_start_gets_a_fresh_interpreter():
    """``PYTHONPATH`` (like every variable read when Python starts: `_warm._AT_START`) is
    seen as a plain start sees it: the waiter starts the program afresh instead of running it
    itself, still with no exec of the engine's."""
    code = "import sys\nprint('/extra' in sys.path, sys.orig_argv[1])"
    sandbox = create("path", code=code, env_vars={"PYTHONPATH": "/extra"}, auto_io=False)
    cold, warm = _cold_then_warm(sandbox)
    assert cold.stdout == warm.stdout == "True /opt/jupyter-sandbox/main.py\n"


def test_command_mode_runs_warm_and_a_missing_program_still_names_itself():
    echo = create("echo", command=["sh", "-c", 'echo "$0 $X"', "hi"], env_vars={"X": "there"})
    cold, warm = _cold_then_warm(echo)
    assert cold.stdout == warm.stdout == "hi there\n"
    missing = create("missing", command=["no-such-program"])
    for _ in range(2):  # cold, then warm
        with pytest.raises(UnusableImage, match="cannot start no-such-program"):
            missing.run()
        _pool.quiesce()


def test_each_warm_container_runs_one_program_and_is_gone(sandbox_pool):
    """A spare serves one run: the next run gets another container (its hostname differs),
    and the one that ran is removed. A pool of the test's own; how many spares wait is its
    demand sizing (runs close together keep more), so the run's host is one of them."""
    sandbox = create("once", code="import socket\nprint(socket.gethostname())", auto_io=False)
    sandbox.run()
    hosts = []
    for _ in range(3):
        _pool.quiesce()
        waiting = {
            slot.container.id[:12] for slots in sandbox_pool.spares.values() for slot in slots
        }
        hosts.append(sandbox.execute({}).stdout.strip())
        assert hosts[-1] in waiting  # a spare ran it
    assert len(set(hosts)) == 3
    _pool.quiesce()
    live = {cid[:12] for cid in sandbox_pool.live}
    assert not live & set(hosts)


def test_the_first_run_after_a_build_takes_the_spare_started_after_it(docker_engine):
    """An environment image has no spare until it is built: one starts as the build ends,
    and the build's own run takes it (its program runs in the spare's waiter: ``-c``)."""
    import uuid

    code = "import sys\nprint(sys.orig_argv[1])"
    step = f"echo {uuid.uuid4().hex}"  # an image nobody built before
    sandbox = create("built", code=code, additional_commands=[step], auto_io=False)
    run = sandbox.execute({})
    try:
        assert run.build is not None and not run.build.cached
        assert run.stdout == "-c\n"
    finally:
        _pool.settle()
        docker_engine.images.remove(run.image, force=True)


def test_an_image_without_python3_runs_cold_and_keeps_no_spare(docker_engine, sandbox_pool):
    """Its spare's waiter cannot start: the pool stops starting spares of it (each would
    cost a container start for nothing), and its runs, cold, are right."""
    import io
    import uuid

    from jupyter_sandbox.sandbox import default_base_image

    tag = f"jupyter-sandbox-test/no-python3:{uuid.uuid4().hex[:12]}"
    dockerfile = f"FROM {default_base_image()}\nUSER root\nRUN rm -f /usr/bin/python3*\n"
    docker_engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    try:
        sandbox = create("no-python", command=["sh", "-c", "echo 7"], image=tag)
        for _ in range(3):
            assert sandbox.execute({}).stdout == "7\n"
            _pool.quiesce()
        assert tag in sandbox_pool.no_waiter  # a fresh pool's: no other test's runs go cold
        assert not [key for key in sandbox_pool.spares if key[0] == tag]
    finally:
        sandbox_pool.settle()
        docker_engine.images.remove(tag, force=True)


def test_a_spare_that_ends_silently_as_it_starts_leaves_its_image_warm(sandbox_pool, monkeypatch):
    """A spare killed, or its engine restarted, from outside while it started ends its stream
    having said nothing: that says nothing of the image, whose later runs stay warm. One such
    start made every run of the image cold for the kernel's life (CI: the adversarial spare
    tests kill spares). Only `_pool._NOT_UP_MAX` of them in a row stop the starts."""
    from jupyter_sandbox.sandbox import _warm

    real = _warm.spare_command
    silent = [_pool._NOT_UP_MAX - 1]  # the spare starts that end at once, saying nothing

    def command(lifetime: int) -> list[str]:
        if silent[0]:
            silent[0] -= 1
            return ["sh", "-c", "exit 0"]
        return real(lifetime)

    monkeypatch.setattr(_warm, "spare_command", command)
    sandbox = create("silent", code="print(6 * 7)", auto_io=False)
    key_spares = lambda: [s for key, slots in sandbox_pool.spares.items() for s in slots]  # noqa: E731
    for _ in range(_pool._NOT_UP_MAX):
        assert sandbox.execute({}).stdout == "42\n"
        sandbox_pool.quiesce()
    assert not silent[0] and not sandbox_pool.no_waiter
    assert key_spares(), "no spare waited after the silent starts"
    # and so many in a row as `_NOT_UP_MAX` do stop them
    sandbox_pool.settle()
    sandbox_pool.not_up.clear()
    silent[0] = _pool._NOT_UP_MAX
    for _ in range(_pool._NOT_UP_MAX + 1):
        assert sandbox.execute({}).stdout == "42\n"
        sandbox_pool.quiesce()
    assert sandbox_pool.no_waiter and not key_spares()
