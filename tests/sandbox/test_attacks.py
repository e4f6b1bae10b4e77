"""An adversarial review of the Docker side after its hardening: each test is an attack
that broke (or degraded) a promise of the README's safety section, against the real engine.

The attacks: orchestration code naming a host path for a sandbox tool's `File` input; a
secret holding a backslash, quote or newline, which Python escapes in tracebacks and our
errors quote; a `Dir` output nested 1,200 folders deep (a raw `RecursionError` from the temp
folder's cleanup, which then stayed behind); a `Dir` input of more subfolders than the
process may open files; a secret cut in half by the truncation of an error message.
"""

from __future__ import annotations

import os
import resource
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox import (
    ContainerError,
    Dir,
    File,
    InvalidOutput,
    NonZeroExit,
    OrchestrationError,
    SandboxConfigError,
    ToolError,
    create,
)
from jupyter_sandbox.events import Output
from jupyter_sandbox.orchestration import orchestrate
from jupyter_sandbox.orchestration._registry import as_tool
from jupyter_sandbox.sandbox import _client
from jupyter_sandbox.sandbox._io import FOLDER_DEPTH_CEILING
from jupyter_sandbox.sandbox._pool import settle

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

CANARY = "root-only-canary-review-41c9"
TOKEN = "TOKEN_UNDER_REVIEW"
ESCAPABLE = "pa\\ss\nw\"o'rd-9"
"""A secret with what ``repr`` escapes: a backslash, a newline and both quotes."""


@pytest.fixture
def host_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private temp folder for every folder the engine makes on the host."""
    private = tmp_path / "host-tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield private
    settle()


def left_behind(host_tmp: Path) -> list[str]:
    settle()
    return sorted(p.name for p in host_tmp.iterdir())


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "private" / "shadow"
    path.parent.mkdir(mode=0o700)
    path.write_text(CANARY)
    os.chmod(path, 0o600)
    return path


def test_orchestration_code_cannot_name_a_host_path_for_a_sandbox_tools_file_input(canary):
    """``json.loads`` returns ``Any``, which passes the type check: the string went to
    ``create()``'s input staging as a host path and the container returned the file."""
    cat = as_tool(
        create("cat", code="content = open(f).read()", inputs={"f": File}, outputs={"c": str})
    )
    code = f"import json\nawait cat(json.loads('\"{canary}\"'))"
    with pytest.raises(ToolError, match="takes a File from a tool or an input, not a str") as err:
        orchestrate(code, tools=[cat])
    assert CANARY not in str(err.value)
    # the handles the host made still cross: an input, and a tool's own output
    mine = canary.parent.parent / "mine.txt"
    mine.write_text("mine")
    echo = as_tool(
        create(
            "echo", code="content = open(f).read()", inputs={"f": File}, outputs={"content": str}
        )
    )
    assert orchestrate("await echo(f)", tools=[echo], inputs={"f": File(mine)}).value == "mine"


def _with_secret(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[Any, list[str]]:
    monkeypatch.setenv(TOKEN, ESCAPABLE)
    shown: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, Output):
            shown.append(event.text)

    sandbox = create("leak", secrets=[TOKEN], **kwargs)
    with pytest.raises(ContainerError) as err:
        sandbox.execute({}, on_event=on_event)
    return err.value, shown


def _escaped_forms() -> list[str]:
    return [repr(ESCAPABLE)[1:-1], repr(ESCAPABLE.encode())[2:-1], "pa\\\\ss"]


def test_a_secret_python_escapes_in_a_traceback_is_masked_there(monkeypatch, isolation):
    """Honest code, ``int(token)``: the traceback quotes the token as ``repr`` writes it."""
    error, shown = _with_secret(monkeypatch, code=f"import os\nint(os.environ[{TOKEN!r}])")
    assert isinstance(error, NonZeroExit)
    seen = "".join(shown) + str(error) + repr(error.record) + error.stderr_tail
    assert "invalid literal for int()" in seen and "***" in seen
    for form in _escaped_forms():
        assert form not in seen


def test_a_secret_our_error_quotes_for_an_unparsable_output_is_masked_there(monkeypatch, isolation):
    code = f"import os\nopen('/var/outputs/x', 'w').write(os.environ[{TOKEN!r}])"
    error, _shown = _with_secret(monkeypatch, code=code, outputs={"x": bool}, auto_io=False)
    assert isinstance(error, InvalidOutput) and "not a bool" in str(error)
    for form in _escaped_forms():
        assert form not in str(error) + repr(error.record)


DEEP = "p=/var/outputs/d; for i in $(seq 1200); do p=$p/a; done; mkdir -p $p && echo x > $p/f"


def test_an_output_nested_past_the_depth_limit_is_one_line_and_leaves_no_folder(
    host_tmp, isolation
):
    """A 1,200-deep `Dir` next to a missing output: the failed run's temp folder could not be
    removed (``shutil.rmtree`` recursed past Python's limit), a raw `RecursionError`."""
    sandbox = create("deep", command=["sh", "-c", DEEP], outputs={"d": Dir, "m": File})
    with pytest.raises(
        InvalidOutput, match=f"nested more than {FOLDER_DEPTH_CEILING} folders deep"
    ) as err:
        sandbox.run()
    assert "\n" not in str(err.value)
    assert left_behind(host_tmp) == []


def test_an_output_within_the_depth_limit_comes_back_whole(host_tmp, isolation):
    levels = (
        FOLDER_DEPTH_CEILING - 1
    )  # folders under the output, then a file: FOLDER_DEPTH_CEILING below it
    script = f"p=/var/outputs/d; for i in $(seq {levels}); do p=$p/a; done; mkdir -p $p"
    tree = create("ok", command=["sh", "-c", script + " && echo x > $p/f"], outputs={"d": Dir})
    assert tree.run().path.joinpath(*["a"] * levels, "f").read_text() == "x\n"


def test_a_dir_input_nested_past_the_depth_limit_is_one_config_line(tmp_path, host_tmp):
    deep = tmp_path / "deep"
    deep.joinpath(*["a"] * (FOLDER_DEPTH_CEILING + 1)).mkdir(parents=True)
    sandbox = create("count", command=["true"], inputs={"d": Dir})
    with pytest.raises(
        SandboxConfigError, match=f"nested more than {FOLDER_DEPTH_CEILING} folders deep"
    ):
        sandbox.run(d=Dir(deep))
    assert left_behind(host_tmp) == []


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "fifo", "folder"])
def test_a_file_input_that_is_no_regular_file_is_one_line_saying_so(tmp_path, special):
    """Nothing is read from it (a FIFO would block, /dev/zero never ends); the line used to
    say "no such file" of a path that exists."""
    path = Path(special) if special.startswith("/") else tmp_path / special
    if special == "fifo":
        os.mkfifo(path)
    elif special == "folder":
        path.mkdir()
    sandbox = create("cat", command=["true"], inputs={"f": File})
    with pytest.raises(SandboxConfigError, match="is not a regular file"):
        sandbox.run(f=File(path))


@pytest.fixture
def few_descriptors() -> Iterator[int]:
    """This process may open 256 files more than it has open, as a kernel under a small
    ``ulimit -n`` may (the suite's process has opened many by now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1 + 256
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    yield limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_dir_input_of_more_subfolders_than_open_files_allowed_is_copied(
    tmp_path, few_descriptors
):
    """Every subfolder of a listing was opened at once: ``EMFILE`` as a raw `OSError`."""
    wide = tmp_path / "wide"
    for i in range(few_descriptors + 100):
        (wide / f"s{i}").mkdir(parents=True)
    (wide / "s7" / "f").write_text("in s7")
    script = "ls /var/inputs/d | wc -l; cat /var/inputs/d/s7/f"
    sandbox = create("count", command=["sh", "-c", script], inputs={"d": Dir})
    assert sandbox.execute({"d": Dir(wide)}).stdout.split() == [
        str(few_descriptors + 100),
        "in",
        "s7",
    ]


@pytest.mark.parametrize("raw", [b"\xff\xfeTAIL-of-secret", b"x" * (128 * 1024 + 1)])
def test_a_secret_no_program_can_receive_is_one_config_line_that_never_shows_it(monkeypatch, raw):
    """Undecodable bytes in the host's variable (``os.environ`` holds them as surrogates) were
    a raw `UnicodeEncodeError` from the engine client; one past 128 KiB a bare exit 126."""
    monkeypatch.setitem(os.environb, TOKEN.encode(), raw)
    sandbox = create("s", command=["true"], secrets=[TOKEN])
    with pytest.raises(SandboxConfigError, match=f"secret '{TOKEN}': its value must be") as err:
        sandbox.run()
    assert "TAIL" not in str(err.value) and "xxxx" not in str(err.value)


def test_the_container_holds_no_secret_socket_or_writable_program_beyond_its_exec(
    monkeypatch, isolation
):
    """What the code can reach besides its own exec (these held): the container's main
    process (``sleep``) has no secret in ``/proc/1/environ``, there is no engine socket, the
    program and input mounts are read-only, and the uid is not one of the image's."""
    monkeypatch.setenv(TOKEN, "S3CR3T-in-exec-only")
    script = (
        "tr '\\0' '\\n' < /proc/1/environ | grep -c S3CR3T;"
        " ls /var/run/docker.sock /run/docker.sock 2>/dev/null | wc -l;"
        " touch /opt/jupyter-sandbox/x /var/inputs/x 2>/dev/null || echo read-only;"
        " id -u"
    )
    control = f"printenv {TOKEN} | grep -c S3CR3T;"  # the exec itself has it: the probe works
    sandbox = create("look", command=["sh", "-c", control + script], secrets=[TOKEN])
    lines = sandbox.execute({}).stdout.split()
    assert lines[:4] == ["1", "0", "0", "read-only"]
    if _client.engine_of(_client.client()).rootless:  # the image's 1000, a subordinate host id
        assert int(lines[4]) == 1000
    else:
        assert int(lines[4]) >= 2_100_000_000


def test_a_secret_cut_by_a_truncated_error_never_shows_its_first_part(monkeypatch):
    """Error text is cut to a bound (Python's ``int()`` at 200 characters) before it is
    masked: the first part of a secret straddling the cut was shown."""
    monkeypatch.setenv(TOKEN, "SECRETVALUE-0123456789")
    code = f"import os\nopen('/var/outputs/x', 'w').write('1' * 190 + os.environ[{TOKEN!r}])"
    sandbox = create("cut", code=code, outputs={"x": int}, secrets=[TOKEN], auto_io=False)
    with pytest.raises(InvalidOutput) as err:
        sandbox.run()
    assert "invalid literal for int()" in str(err.value)  # the cut message, masked
    assert "SECRETVAL" not in str(err.value) + repr(err.value.record)


SECRET_CUT = "SECRETVALUE-0123456789"


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda s: f"not a bool: {('1' * 30 + s)[:40]!r}", id="our-40-char-repr"),
        pytest.param(lambda s: repr(f"/var/outputs/{s}"[:20] + "..."), id="our-ellipsis"),
        pytest.param(lambda s: f"tail: '...{s[7:]}'", id="a-tail"),
        pytest.param(lambda s: f"{s[5:]} was the start", id="the-text-start"),
        pytest.param(lambda s: repr(("1" * 30 + s).encode())[:40], id="bytes-repr-end"),
    ],
)
def test_a_secret_cut_at_any_bound_of_an_error_shows_at_most_one_character(cut):
    from jupyter_sandbox._shared._secrets import mask_error

    for secret in (SECRET_CUT, ESCAPABLE):
        err = InvalidOutput(cut(secret), name="x")
        mask_error(err, (secret,))
        shown = str(err)
        assert "***" in shown
        for spelling in (secret, repr(secret)[1:-1]):
            pieces = {spelling[i : i + 2] for i in range(len(spelling) - 1)}
            assert not any(p in shown for p in pieces if not p.isdigit()), shown


def test_a_sandbox_tools_secret_stays_masked_when_a_later_run_gets_it_without_the_tool(
    monkeypatch,
):
    """A cache answering the call, or a session variable holding the value, hands a later run
    the secret without the tool running there: it is still masked."""
    import json

    from jupyter_sandbox.orchestration import ToolCache

    monkeypatch.setenv(TOKEN, "S3CR3T-cached-or-kept")
    code = f"import os\nt = os.environ[{TOKEN!r}]"
    tok = as_tool(create("tok", code=code, outputs={"t": str}, secrets=[TOKEN]))
    cache = ToolCache()
    runs = [orchestrate("t = await tok()\nprint(t)\nt", tools=[tok], cache=cache) for _ in "12"]
    assert runs[1].trace[0].replayed  # the second run never called the tool
    runs.append(orchestrate("t = await tok()", tools=[tok], session="kept-secret"))
    runs.append(orchestrate("print(t)\nt", tools=[tok], session="kept-secret"))
    assert runs[-1].value == "S3CR3T-cached-or-kept"
    for run in runs:
        assert "S3CR3T" not in json.dumps(run.to_record(), default=repr) + run.stdout


def test_a_cell_ending_in_a_sandbox_tools_secret_shows_it_hidden(shell, monkeypatch):
    """``%%orchestrate`` returned the value to IPython, whose ``Out[]`` (saved in the
    notebook) wrote the secret out; ``--out`` gets the real value, as ``%%sandbox``'s do."""
    from jupyter_sandbox._shared._secrets import HIDDEN
    from jupyter_sandbox.orchestration import tool

    monkeypatch.setenv(TOKEN, "S3CR3T-in-a-cell")
    code = f"import os\nt = os.environ[{TOKEN!r}]"
    tool(create("tok", code=code, outputs={"t": str}, secrets=[TOKEN]), name="tok")
    outcome = shell.run_cell("%%orchestrate --out t\nt = await tok()\nprint(t)\nt")
    assert outcome.error_in_exec is None
    assert repr(outcome.result) == HIDDEN
    assert shell.user_ns["t"] == "S3CR3T-in-a-cell"


GROWTH = """
import resource, sys
from jupyter_sandbox import OutputLimitExceeded, create
from jupyter_sandbox.sandbox._pool import settle
code = "n = 16 * 2**20 // 3\\nopen('/var/outputs/x', 'w').write('[' + '[],' * (n - 1) + '[]]')"
resources = {"disk": "32M", "memory": "256m"}
sandbox = create("j", code=code, outputs={"x": list}, auto_io=False, resources=resources)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    outcome = f"decoded {len(sandbox.run())}"
except OutputLimitExceeded as err:
    outcome = str(err)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024, outcome)
settle()
"""


def test_a_json_output_never_costs_the_kernel_more_than_the_runs_memory_limit():
    """16 MiB of '[],' decode to ~340 MiB of lists (x21; the default 256 MiB disk limit let a
    container ask the kernel for ~7 GB): with a 256 MiB memory limit the output is refused
    before it is decoded. Measured in a fresh process, so the peak is this run's alone."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", GROWTH], capture_output=True, text=True, check=True, timeout=300
    )
    growth, outcome = done.stdout.split(maxsplit=1)
    assert "output 'x' would decode to" in outcome, outcome
    assert "raise resources memory" in outcome
    assert len(outcome.strip().splitlines()) == 1
    assert int(growth) < 8 * 16 * 2**20


def test_a_json_output_within_the_memory_limit_is_decoded():
    n = 2**20 // 3  # 1 MiB of '[],': ~21 MiB of lists, within 256 MiB
    code = f"open('/var/outputs/x', 'w').write('[' + '[],' * ({n} - 1) + '[]]')"
    resources = {"disk": "32M", "memory": "256m"}
    value = create("j", code=code, outputs={"x": list}, auto_io=False, resources=resources).run()
    assert value == [[]] * n


def test_a_secret_a_sandbox_tool_returns_never_shows_in_the_orchestration_record(monkeypatch):
    """A sandbox tool returns its output's real value to the orchestration (as create() does
    to the notebook); nothing on the orchestrate side knew the sandbox's secrets, so the
    call's result preview, the printed stream and the record's value showed it unmasked."""
    import json

    monkeypatch.setenv(TOKEN, "S3CR3T-through-a-tool")
    code = f"import os\nt = os.environ[{TOKEN!r}]"
    tok = as_tool(create("tok", code=code, outputs={"t": str}, secrets=[TOKEN]))
    seen: list[str] = []

    def echo(text: str) -> str:
        seen.append(text)
        return text

    events: list[object] = []
    cell = (
        "t = await tok()\nprint('got', t)\nprint(t[:4], end='')\nprint(t[4:])\n"
        "echo(t)\nprint('x' * 300 + t)\n[t, 'x' * 300 + t]"
    )
    result = orchestrate(cell, tools=[tok, echo], on_event=events.append)
    # the value itself is the code's to use, and to pass to other tools
    assert result.value == ["S3CR3T-through-a-tool", "x" * 300 + "S3CR3T-through-a-tool"]
    assert seen == ["S3CR3T-through-a-tool"]
    shown = json.dumps(result.to_record(), default=repr) + result.stdout
    streamed = "".join(e.text for e in events if isinstance(e, Output))
    assert "got ***" in result.stdout and "got ***" in streamed
    for text in (shown, streamed):
        assert "S3CR3T" not in text and "3CR" not in text

    # an error quoting it: the message, its traceback and the record
    with pytest.raises(OrchestrationError, match="ValueError") as err:
        orchestrate("t = await tok()\nraise ValueError('bad ' + t)", tools=[tok])
    raised = str(err.value) + err.value.sandbox_traceback
    assert "bad ***" in raised and "S3CR3T" not in raised
    assert "S3CR3T" not in json.dumps(err.value.result.to_record(), default=repr)
