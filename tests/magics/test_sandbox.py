"""``%%sandbox`` in a real IPython shell against the real Docker engine."""

from __future__ import annotations

import pytest

from jupyter_sandbox import (
    ImageBuildError,
    NonZeroExit,
    Sandbox,
    SandboxTimeout,
    create,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]


def cell(shell, line, body):
    return shell.run_cell(f"%%sandbox {line}\n{body}")


@pytest.fixture
def nb(shell, docker_engine):
    shell.user_ns.update(x=21, y=0.5, s='it\'s "quoted"\n$(id)', items=[1, 2])
    return shell


def test_inputs_and_outputs_cross_as_variables(nb):
    result = cell(nb, "--in x --out result:int", "result = x * 2")
    assert result.success
    assert nb.user_ns["result"] == 42


def test_names_repeat_or_comma_separate_and_types_are_inferred(nb):
    body = "a = x + y\nb = s\nc = items + [3]"
    assert cell(nb, "--in x,y --in s --in items --out a,b --out c:list", body).success
    assert nb.user_ns["a"] == 21.5
    assert nb.user_ns["b"] == nb.user_ns["s"]
    assert nb.user_ns["c"] == [1, 2, 3]


def test_name_defines_a_callable(nb, capsys):
    body = "print('doubling', x)\nresult = x * 2"
    assert cell(nb, "--name double --in x --out result:int", body).success
    double = nb.user_ns["double"]
    assert isinstance(double._sandbox, Sandbox)
    capsys.readouterr()
    called = nb.run_cell("double(x=5)")
    assert called.success
    assert called.result == 10
    out = capsys.readouterr().out
    assert "doubling 5" in out  # the later call streams its output into that cell
    assert "sandbox 'double' ok" in out  # and shows its record there


def test_output_streams_into_the_cell(nb, capsys):
    body = "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)"
    assert cell(nb, "--quiet", body).success
    captured = capsys.readouterr()
    assert captured.out == "to stdout\n"
    assert captured.err == "to stderr\n"


def test_record_is_displayed_unless_quiet(nb, capsys):
    assert cell(nb, "--in x --out result", "result = x").success
    assert "sandbox ok in " in capsys.readouterr().out  # unnamed: not named 'sandbox' twice
    assert cell(nb, "--in x --out result --quiet", "result = x").success
    assert capsys.readouterr().out == ""


def test_command_mode_runs_bash(nb):
    body = 'echo "$(( $(cat /var/inputs/x) + 1 ))" > /var/outputs/n'
    assert cell(nb, "--command --in x --out n:int", body).success
    assert nb.user_ns["n"] == 22


def test_verbatim_mode_runs_as_written(nb):
    body = "import pathlib\nv = pathlib.Path('/var/inputs/s').read_text()\npathlib.Path('/var/outputs/v').write_text(v[::-1])"  # noqa: E501
    assert cell(nb, "--verbatim --in s --out v", body).success
    assert nb.user_ns["v"] == nb.user_ns["s"][::-1]


def test_limits_env_and_secrets_options(nb, monkeypatch):
    monkeypatch.setenv("JSBX_MAGIC_SECRET", "hunter2")
    body = (
        "import os\n"
        "mem = open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip() "
        "if os.path.exists('/sys/fs/cgroup/memory/memory.limit_in_bytes') "
        "else open('/sys/fs/cgroup/memory.max').read().strip()\n"
        "env = os.environ['MODE'] + ':' + os.environ['JSBX_MAGIC_SECRET']\n"
    )
    line = "--memory 256m --cpus 0.5 --env MODE=fast --secret JSBX_MAGIC_SECRET --out mem,env"
    assert cell(nb, line, body).success
    assert nb.user_ns["mem"] == str(256 * 2**20)
    assert nb.user_ns["env"] == "fast:hunter2"


def test_failure_shows_the_record_and_raises(nb, capsys):
    result = cell(nb, "", "print('partial')\nraise SystemExit('bad things')")
    assert isinstance(result.error_in_exec, NonZeroExit)
    out = capsys.readouterr()
    assert "partial" in out.out
    assert "sandbox error in " in out.out and "(exit 1)" in out.out
    assert "bad things" in out.out + out.err


def test_timeout_option(nb):
    result = cell(nb, "--timeout 1", "import time\ntime.sleep(30)")
    assert isinstance(result.error_in_exec, SandboxTimeout)
    assert "timed out after 1 s" in str(result.error_in_exec)


def test_retries_option(nb):
    result = cell(nb, "--retries 1", "raise SystemExit(4)")
    assert result.error_in_exec.record["attempts"] == 2


def test_cache_option(nb, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    body = "import random\nr = random.random()"
    assert cell(nb, "--cache --out r", body).success
    first = nb.user_ns["r"]
    assert cell(nb, "--cache --out r", body).success
    assert nb.user_ns["r"] == first
    assert cell(nb, "--out r", body).success
    assert nb.user_ns["r"] != first


def test_packages_option(nb):
    assert cell(nb, "--packages six idna --out v", "import six\nv = six.__name__").success
    assert nb.user_ns["v"] == "six"


def test_base_image_per_cell_config_and_env(nb, monkeypatch):
    result = cell(nb, "--base-image jsbx/none:1", "pass")
    assert isinstance(result.error_in_exec, ImageBuildError)
    assert "jsbx/none:1" in str(result.error_in_exec)
    nb.run_line_magic("config", "SandboxMagics.base_image = 'jsbx/none:2'")
    try:
        assert "jsbx/none:2" in str(cell(nb, "", "pass").error_in_exec)
    finally:
        nb.run_line_magic("config", "SandboxMagics.base_image = ''")
    monkeypatch.setenv("JUPYTER_SANDBOX_BASE_IMAGE", "jsbx/none:3")
    assert "jsbx/none:3" in str(cell(nb, "", "pass").error_in_exec)
    assert create("api", code="").image_spec.base == "jsbx/none:3"


def test_image_option_runs_a_prebuilt_image(nb):
    assert cell(nb, "--image jupyter-sandbox/base:bookworm --out v", "v = 1").success


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--in nope", "no variable 'nope'"),
        ("--in x:complex", "unsupported type"),
        ("--out 1bad", "not a valid Python variable name"),
        ("--verbatim --command", "pick one"),
        ("--env NOEQUALS", "KEY=VALUE"),
        ("--network host", "invalid choice"),
        ("--name not-a-name", "not a valid Python variable name"),
        ("--bogus", "unknown option --bogus: %%sandbox --help lists its options"),
        ("--image img --packages six", "prebuilt"),
        ("--memory lots", "bad size"),
        ("--cpus 0", "--cpus must be a number from 0.01 to"),
        ("--timeout -1", "timeout"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(nb, capsys, line, message):
    from IPython.core.error import UsageError

    result = cell(nb, line, "pass")
    assert not result.success
    err = result.error_in_exec or result.error_before_exec
    assert isinstance(err, UsageError), err
    assert message in str(err)
    assert "\n" not in str(err)


def test_bad_values_are_usage_errors_before_any_progress(nb, capsys, monkeypatch):
    from IPython.core.error import UsageError

    monkeypatch.delenv("JSBX_UNSET", raising=False)
    # the shell is shared by every test: monkeypatch takes these names out again
    monkeypatch.setitem(nb.user_ns, "t", (1, 2))
    monkeypatch.setitem(nb.user_ns, "missing", "/nonexistent/file")
    for line in ("--in t:list", "--in missing:File", "--secret JSBX_UNSET"):
        result = cell(nb, line, "pass")
        assert isinstance(result.error_in_exec, UsageError), line
    assert "sandbox 'sandbox'" not in capsys.readouterr().out  # no record was shown
