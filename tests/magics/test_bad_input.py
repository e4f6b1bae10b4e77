"""Every bad input is one line of ours, and nothing is lost (options, names,
images, escape codes, retries).

Each test feeds a real magic in a real IPython shell (and the engines' own API) what an
attacker or a tired user would: limits that are NaN, infinite, huge, negative or zero; names
that are keywords or that clash; an image reference that is not one, an image without
python3; a container that writes terminal escape codes into what becomes our error text.
Each must end as one line of ours (a `UsageError` naming the option for the magics, a
`SandboxConfigError` or `ContainerError` for the API) with no container left behind, and the
next cell must work.
"""

from __future__ import annotations

import io
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError

from jupyter_sandbox import (
    NonZeroExit,
    Resources,
    SandboxConfigError,
    UnusableImage,
    create,
)
from jupyter_sandbox._shared._checks import machine_cpus
from jupyter_sandbox._shared._text import printable
from jupyter_sandbox.magics._common import in_options
from jupyter_sandbox.orchestration import Limits, orchestrate
from jupyter_sandbox.sandbox import _client, default_base_image
from jupyter_sandbox.sandbox._pool import settle

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

_TERMINAL_CONTROL = ("\x1b", "\x07", "\x9b", "\r", "\u202e")
"""What a terminal acts on (ESC, BEL, the 8-bit CSI, carriage return) or that makes text read
differently from what it is (a bidi override)."""


@pytest.fixture
def nb(shell, docker_engine):
    shell.user_ns.update(x=21)
    return shell


def _failure(result: Any) -> BaseException:
    err = result.error_in_exec or result.error_before_exec
    assert err is not None, "the cell should have failed"
    return err


def _one_usage_line(nb: Any, capsys: Any, cell: str, option: str) -> str:
    """Run ``cell``: a `UsageError` whose one-line message names ``option``, shown as that
    one line (no traceback); returns the message."""
    capsys.readouterr()
    err = _failure(nb.run_cell(cell))
    shown = capsys.readouterr().err.strip()
    assert isinstance(err, UsageError), repr(err)
    message = str(err)
    assert "\n" not in message
    assert message.startswith(option), message
    assert shown == f"UsageError: {message}"
    return message


def _sandbox_still_works(nb: Any) -> None:
    result = nb.run_cell("%%sandbox --quiet --in x --out doubled:int\ndoubled = x * 2")
    assert result.success, result.error_in_exec
    assert nb.user_ns["doubled"] == 42


def _orchestrate_still_works(nb: Any) -> None:
    result = nb.run_cell("%%orchestrate --quiet --in x\nx + 1")
    assert result.success, result.error_in_exec
    assert result.result == 22


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ("--cpus nan", "--cpus"),
        ("--cpus inf", "--cpus"),
        ("--cpus -1", "--cpus"),
        ("--cpus 0", "--cpus"),
        ("--cpus 1000", "--cpus"),  # the engine's 400: more CPUs than the machine has
        ("--memory 1", "--memory"),  # the engine's 400: below its 6 MB minimum
        ("--memory 0", "--memory"),
        ("--memory 100000t", "--memory"),
        ("--timeout inf", "--timeout"),
        ("--timeout nan", "--timeout"),
        ("--timeout -1", "--timeout"),
        ("--timeout 0", "--timeout"),
        ("--timeout 1e308", "--timeout"),
        ("--retries -1", "--retries"),
        ("--retries 1000000000", "--retries"),
        ("--image ''", "--image"),  # the engine's 400: invalid reference format
        ("--image Not/An/Image", "--image"),
        ("--image bad:tag:twice", "--image"),
        ("--base-image ''", "--base-image"),
    ],
)
def test_a_bad_sandbox_option_is_one_usage_line_naming_it_and_runs_nothing(
    nb, capsys, options, option
):
    _one_usage_line(nb, capsys, f"%%sandbox {options}\nprint('never runs')", option)
    _sandbox_still_works(nb)


def test_a_command_cell_linux_cannot_pass_to_bash_is_one_usage_line(nb, capsys):
    cell = "%%sandbox --command\n" + "echo x\n" * 30_000  # past the 128 KiB of one argument
    _one_usage_line(nb, capsys, cell, "--command")
    _sandbox_still_works(nb)


def test_too_many_cpus_says_how_many_the_machine_has(nb, capsys):
    message = _one_usage_line(nb, capsys, "%%sandbox --cpus 1000\npass", "--cpus")
    assert f"the host has {machine_cpus()} CPUs" in message


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ("--timeout 1e308", "--timeout"),  # overflowed Monty's Duration
        ("--timeout inf", "--timeout"),
        ("--timeout nan", "--timeout"),
        ("--timeout 0", "--timeout"),
        ("--max-memory 100000000000000", "--max-memory"),  # overflowed Monty's byte count
        ("--max-memory 0", "--max-memory"),
        ("--max-memory -5", "--max-memory"),
        ("--max-calls 10000000000000000000", "--max-calls"),  # overflowed Monty's counter
        ("--max-calls 0", "--max-calls"),
        ("--max-result 0", "--max-result"),
        ("--max-output 100000000000000", "--max-output"),
    ],
)
def test_a_bad_orchestrate_limit_is_one_usage_line_naming_it(nb, capsys, options, option):
    _one_usage_line(nb, capsys, f"%%orchestrate {options}\n1 + 1", option)
    _orchestrate_still_works(nb)


def test_a_bad_limit_configured_for_every_cell_is_one_usage_line_too(nb, capsys):
    nb.run_line_magic("config", "OrchestrateMagics.timeout = 1e308")
    try:
        _one_usage_line(nb, capsys, "%%orchestrate\n1 + 1", "--timeout")
    finally:
        nb.run_line_magic("config", "OrchestrateMagics.timeout = 30.0")
    _orchestrate_still_works(nb)


@pytest.mark.parametrize(
    "call",
    [
        lambda: create("t", code="pass", timeout=math.inf),
        lambda: create("t", code="pass", timeout=1e308),
        lambda: create("t", code="pass", retries=True),
        lambda: create("t", code="pass", image=""),
        lambda: create("t", code="pass", base_image="no such image"),
        lambda: create("t", code="pass", resources={"cpu": math.nan}),
        lambda: create("t", code="pass", resources={"cpu": "1e9m"}),
        lambda: create("t", code="pass", resources={"memory": "1"}),
        lambda: create("t", code="pass", resources={"pids": 2**63}),
        lambda: Resources(disk="0"),
        # what execve refuses: the run used to fail as a bare "exited with code 126"
        lambda: create("t", code="pass", env_vars={"A": "x\x00y"}),
        lambda: create("t", code="pass", env_vars={"A": "x" * 200_000}),
        lambda: create("t", command=["echo", "a\x00b"]),
        lambda: orchestrate("1", limits=Limits(timeout=1e308)),
        lambda: orchestrate("1", limits=Limits(max_memory=10**14)),
        lambda: orchestrate("1", limits=Limits(max_calls=10**19)),
        lambda: orchestrate("1", limits=Limits(max_calls=True)),
    ],
)
def test_the_api_refuses_the_same_limits_as_one_line_config_errors(call):
    with pytest.raises(SandboxConfigError) as caught:
        call()
    assert "\n" not in str(caught.value)
    assert caught.value.parameter, "the error names the parameter at fault"
    assert str(caught.value).startswith(caught.value.parameter)


@pytest.mark.parametrize(
    ("cell", "option"),
    [
        ("%%sandbox --name class\npass", "--name class: a Python keyword"),
        ("%%sandbox --name 2x\npass", "--name 2x: not a valid Python variable name"),
        ("%%sandbox --out class\nclass_ = 1", "--out class: a Python keyword"),
        # outputs become notebook variables in every mode, not only in auto-IO
        ("%%sandbox --command --out def\necho 1 > /var/outputs/def", "--out def: a Python"),
        ("%%sandbox --verbatim --out None:int\npass", "--out None: a Python keyword"),
        ("%%sandbox --in lambda\npass", "--in lambda: a Python keyword"),
        ("%%orchestrate --out class\n1", "--out class: a Python keyword"),
        ("%%orchestrate --out return\n1", "--out return: a Python keyword"),
    ],
)
def test_a_keyword_or_non_identifier_is_never_bound_as_a_notebook_name(nb, capsys, cell, option):
    before = set(nb.user_ns)
    _one_usage_line(nb, capsys, cell, option)
    assert set(nb.user_ns) - before <= {"_", "__", "___"}  # nothing bound
    _orchestrate_still_works(nb)


def test_a_soft_keyword_is_a_name_like_any_other(nb):
    result = nb.run_cell("%%sandbox --quiet --name match --in x --out type:int\ntype = x + 1")
    assert result.success, result.error_in_exec
    assert nb.user_ns["type"] == 22
    assert nb.run_cell("match(x=1)").result == 2


@pytest.mark.parametrize(
    ("options", "clash"),
    [
        ("--name x --in x", "--in x"),
        ("--name y --out y:int", "--out y"),
        ("--name y --out a,y", "--out y"),
    ],
)
def test_name_never_replaces_an_in_or_out_variable_of_the_same_cell(nb, capsys, options, clash):
    nb.user_ns.pop("y", None)
    message = _one_usage_line(nb, capsys, f"%%sandbox {options}\na = y = 1", "--name")
    assert clash in message
    assert nb.user_ns["x"] == 21  # the input is still the notebook's, not a callable
    assert "y" not in nb.user_ns
    _sandbox_still_works(nb)


@pytest.fixture
def no_python_image(isolation) -> Iterator[str]:
    """The base image with python3 removed (bash stays), under a tag of this test run's own,
    on the engine the test's ``isolation`` variant runs on (built again each test: its layers
    are cached)."""
    tag = f"jupyter-sandbox-test/no-python3:{uuid.uuid4().hex[:12]}"
    dockerfile = (
        f"FROM {default_base_image()}\nUSER root\n"
        "RUN rm -f /usr/bin/python3* /usr/local/bin/python3*\nUSER 1000:1000\n"
    )
    engine = _client.client()  # the engine of the test's variant (Docker or Podman)
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    settle()  # a container of it may still be being removed (Podman refuses the removal then)
    engine.images.remove(tag, force=True)


@pytest.mark.parametrize("mode", ["", "--verbatim"])
def test_an_image_without_python3_is_one_line_naming_it_and_is_never_retried(
    nb, capsys, no_python_image, mode, isolation
):
    capsys.readouterr()
    cell = f"%%sandbox {mode} --image {no_python_image} --retries 2\nprint('hi')"
    err = _failure(nb.run_cell(cell))
    assert isinstance(err, UnusableImage), repr(err)
    message = str(err)
    assert "\n" not in message
    assert no_python_image in message
    assert "cannot start python3" in message
    assert "command=[...]" in message  # says what to do instead, in the engine's words
    assert (err.parameter, err.program) == ("command", "python3")
    shown = in_options(err)  # and the cell's: the option
    assert "--command" in shown and "command=[...]" not in shown
    assert err.record is not None
    assert err.record["attempts"] == 1  # the image is at fault: a re-run cannot help
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"UnusableImage: {shown}"
    _sandbox_still_works(nb)


def test_the_same_image_runs_command_mode_as_its_error_advises(nb, no_python_image, isolation):
    options = f"--quiet --command --image {no_python_image} --out n:int"
    cell = f"%%sandbox {options}\necho 7 > /var/outputs/n"
    result = nb.run_cell(cell)
    assert result.success, result.error_in_exec
    assert nb.user_ns["n"] == 7


def test_a_command_the_image_lacks_is_an_unusable_image_naming_the_program(
    no_python_image, isolation
):
    sandbox = create("t", command=["no-such-program"], image=no_python_image, retries=1)
    with pytest.raises(UnusableImage, match="cannot start no-such-program") as caught:
        sandbox.run()
    assert caught.value.record is not None
    assert caught.value.record["attempts"] == 1


def test_a_program_exiting_127_itself_is_still_its_own_nonzero_exit(nb, isolation):
    """Only the runtime's own "cannot exec" is the image's fault: code that exits 127 (a
    missing command inside bash) is the code's failure, retried like any other."""
    result = nb.run_cell("%%sandbox --command --retries 1\nno-such-command-here")
    err = _failure(result)
    assert isinstance(err, NonZeroExit), repr(err)
    assert err.exit_code == 127
    assert err.record is not None
    assert err.record["attempts"] == 2


_ESCAPES = (
    "\x1b]52;c;cHduZWQ=\x07"  # OSC 52: set the clipboard
    "\x1b]0;pwned title\x1b\\"  # OSC 0: set the window title (ST-terminated)
    "\x1b[2J\x1b[H"  # CSI: clear the screen, cursor home
    "\x1b[31mred\x1b[0m"  # CSI SGR
    "\x9b6n"  # the 8-bit CSI: ask the terminal to report the cursor
    "\u202eevil\u202c"  # a right-to-left override
    "\rvisible boom"
)


@pytest.mark.parametrize("stream", ["stderr", "stdout"])
def test_escape_codes_from_the_container_never_reach_error_text(nb, capsys, stream, isolation):
    cell = f"%%sandbox --retries 1\nimport sys\nsys.{stream}.write({_ESCAPES!r})\nsys.exit(3)"
    capsys.readouterr()
    err = _failure(nb.run_cell(cell))
    out = capsys.readouterr().out
    shown = out[out.index("sandbox error") :]  # the record and error after the stream
    assert isinstance(err, NonZeroExit), repr(err)
    assert err.record is not None
    texts = [str(err), err.stderr_tail, str(err.record["error"]), shown]
    for text in texts:
        for control in _TERMINAL_CONTROL:
            assert control not in text, (control, text)
    # the error once, at the end; when its stderr was streamed, the line points there
    assert shown.rstrip().splitlines()[-1].startswith("NonZeroExit: exited with code 3")
    if stream == "stderr":
        assert str(err).endswith(": visible boom")  # the words stay, the codes go
        assert "redevil" in err.stderr_tail
    # the stream itself is the program's output, passed on as written (see README)
    assert "\x1b]52;" in err.record[stream]
    _sandbox_still_works(nb)


def test_escape_codes_in_a_bad_output_never_reach_error_text(nb, isolation):
    cell = f"%%sandbox --verbatim --out n:int\nopen('/var/outputs/n', 'w').write({_ESCAPES!r})"
    err = _failure(nb.run_cell(cell))
    assert err.record is not None
    for text in (str(err), str(err.record["error"])):
        for control in _TERMINAL_CONTROL:
            assert control not in text, (control, text)


def test_printable_keeps_words_and_layout_and_drops_every_escape_family():
    dcs = "\x1bP1;2|secret\x1b\\"
    text = f"héllo ✓\tcol\n{_ESCAPES}{dcs}\x00\x7f end"
    clean = printable(text)
    assert clean == "héllo ✓\tcol\nredevilvisible boom end"
