"""Build logs as a person reads them: whole lines, steps named by what they do, Docker's own step
count, ``cached`` for a cached image, and a bad package said in one line with its log once.

Builds run on the real engine. The engine's raw stream is recorded by a pass-through spy on the
real client (every chunk still comes from Docker), so the tests can compare what we report with
what Docker sent. One fresh build of ``six`` and one failing build are shared per module.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import docker.errors
import pytest
from jupyter_client.manager import start_new_kernel

from jupyter_sandbox import ImageBuildError, InvalidPackageError, create
from jupyter_sandbox.display import RUN_MIME, _html, _text
from jupyter_sandbox.display._live import LiveRun
from jupyter_sandbox.events import BuildFinished, BuildLog, BuildStarted, BuildStep, Event
from jupyter_sandbox.magics._common import format_error
from jupyter_sandbox.sandbox import BuildInfo, ImageSpec, default_base_image
from jupyter_sandbox.sandbox._build import LineSplitter
from jupyter_sandbox.sandbox._image import ensure_image

BAD = "jsbx-no-such-package-4242"
MISSING_LINE = f"Because {BAD} was not found in the package registry"
"""uv's line naming the missing package: in the log, to be shown exactly once."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _RecordingAPI:
    """The real low-level client, with every build chunk kept as Docker sent it."""

    def __init__(self, api: Any, chunks: list[dict[str, Any]]) -> None:
        self._api = api
        self._chunks = chunks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)  # everything but the build: the real client's

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for chunk in self._api.build(**kwargs):
            self._chunks.append(chunk)
            yield chunk


class _RecordingClient:
    def __init__(self, real: Any) -> None:
        self.images = real.images
        self.chunks: list[dict[str, Any]] = []
        self.api = _RecordingAPI(real.api, self.chunks)


def _source_lines(chunks: list[dict[str, Any]]) -> set[str]:
    """The lines of Docker's stream once joined, as we would print them."""
    text = "".join(str(c.get("stream", "")) for c in chunks)
    return {_ANSI.sub("", line).rstrip() for line in text.split("\n")}


def _live_views(events: list[Event]) -> tuple[list[str], dict[str, Any]]:
    """The live view (the live record's HTML) after each event, and the last live record."""
    live = LiveRun()
    seen = []
    for event in events:
        live.on_event(event)
        seen.append(_html.render(live.record()))
    return seen, live.record()


def _six_from_scratch(docker_engine: Any) -> ImageSpec:
    """The spec of an image of ``six``, removed so that the next build really runs."""
    spec = ImageSpec.normalise(default_base_image(), packages=["six"])
    tag = spec.tag(docker_engine.images.get(spec.base).id)
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_engine.images.remove(tag, force=True)
    return spec


@pytest.fixture(scope="module")
def six_build(docker_engine) -> tuple[ImageSpec, BuildInfo, list[Event], list[dict[str, Any]]]:
    """A build of ``six`` from scratch, with its events and Docker's raw chunks."""
    spec = _six_from_scratch(docker_engine)
    spy = _RecordingClient(docker_engine)
    events: list[Event] = []
    _, _, info = ensure_image(spy, spec, events.append)
    assert info is not None and info.error is None, info and info.log
    return spec, info, events, spy.chunks


@pytest.fixture(scope="module")
def bad_package(docker_engine) -> tuple[InvalidPackageError, list[Event]]:
    events: list[Event] = []
    sandbox = create("bad-pkg", code="import six", packages=["six", BAD])
    with pytest.raises(InvalidPackageError) as info:
        sandbox.execute({}, on_event=events.append)
    return info.value, events


def test_a_live_record_is_a_snapshot_its_later_steps_do_not_change():
    """A live record is worded (its ``summary``) when made and sent later: the steps that came
    meanwhile must not slip into it. They did (the list was shared), and JupyterLab drew
    "building: step 1 of 6" beside "step 4 of 6: installing six" (CI's browser test)."""
    from jupyter_sandbox.display._format import summarised

    live = LiveRun()
    live.on_event(BuildStarted("jupyter-sandbox/env:0123456789ab", total_steps=6))
    live.on_event(BuildStep(1, 6, "FROM the base"))
    shown = summarised(live.record())
    for index in (2, 3, 4):
        live.on_event(BuildStep(index, 6, f"step {index}"))
    build = shown["build"]
    assert build is not None and build["steps"] == ["FROM the base"]
    assert (
        shown["summary"]["build"] == "image jupyter-sandbox/env:0123456789ab: building: step 1 of 6"
    )
    assert "step 4" not in _html.render(shown)


def test_splitter_joins_chunks_cut_mid_line():
    """Recorded chunk boundaries from a real build log (the issue's ``warning\\n:\\nThe``)."""
    splitter = LineSplitter()
    chunks = [
        "Step 1/5 : FROM base",
        "\n",
        "\x1b[91mwarning",
        ": The cache is cold\n\x1b[0m",
        "\x1b[91mResolved ",
        "1 package in 207ms\nPrepared 1 package",
        " in 30ms\n\x1b[0m",
        "Downloading 10%\rDownloading 100%\r\n",
        "no newline at the end",
    ]
    lines = [line for chunk in chunks for line in splitter.feed(chunk)]
    assert lines == [
        "Step 1/5 : FROM base",
        "warning: The cache is cold",
        "Resolved 1 package in 207ms",
        "Prepared 1 package in 30ms",
        "Downloading 100%",
    ]
    assert splitter.flush() == ["no newline at the end"]
    assert splitter.flush() == []


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
class TestRealBuild:
    def test_events_and_log_carry_whole_lines(self, six_build):
        _, info, events, chunks = six_build
        assert any(not str(c.get("stream", "\n")).endswith("\n") for c in chunks), (
            "Docker sent no chunk cut mid-line: this build cannot show the splitting"
        )
        source = _source_lines(chunks)
        logged = [e.line for e in events if isinstance(e, BuildLog)]
        assert "Resolved 1 package" in " ".join(logged)
        for line in logged + info.log.splitlines():
            assert line in source, f"{line!r} is not a whole line of Docker's stream"

    def test_live_line_says_what_is_being_installed(self, six_build):
        _, info, events, _ = six_build
        steps = [e.text for e in events if isinstance(e, BuildStep)]
        assert "installing six (uv)" in steps
        assert "installing six (uv)" in info.steps
        seen, _ = _live_views(events)
        live_step = re.compile(r"<div>step \d+ of \d+: installing six \(uv\)</div>")
        assert any(live_step.search(html) for html in seen)
        for html in seen:
            assert "SSL_CERT_FILE" not in html

    def test_no_uv_warning_about_our_own_settings(self, six_build):
        _, info, _, chunks = six_build
        raw = "".join(str(c.get("stream", "")) for c in chunks)
        assert "uv pip install" in raw  # the step that used to warn did run
        assert "UV_NATIVE_TLS" not in raw
        assert "warning" not in raw.lower()
        assert "warning" not in info.log.lower()

    def test_step_counts_are_dockers(self, six_build):
        _, info, events, chunks = six_build
        raw = "".join(str(c.get("stream", "")) for c in chunks)
        docker_steps = [(int(n), int(m)) for n, m in re.findall(r"Step (\d+)/(\d+) :", raw)]
        assert docker_steps, raw
        total = docker_steps[-1][1]
        assert [(e.index, e.total) for e in events if isinstance(e, BuildStep)] == docker_steps
        started = [e for e in events if isinstance(e, BuildStarted)]
        assert [s.total_steps for s in started] == [total]
        record = info.to_record()
        assert record["total_steps"] == len(record["steps"]) == total
        assert f'<progress max="{total}" value="{total}">' in _html.render(
            {"kind": "sandbox", "build": record}
        )
        seen, _ = _live_views(events)
        assert any(f"<div>step {total} of {total}: labelling the image</div>" in h for h in seen)

    def test_cached_image_says_cached(self, six_build):
        _, info, _, _ = six_build
        events: list[Event] = []
        run = create("six-cached", code="import six", packages=["six"]).execute(
            {}, on_event=events.append
        )
        assert run.image == info.tag
        build_events = [e for e in events if isinstance(e, BuildStarted | BuildStep | BuildLog)]
        assert build_events == []
        finished = [e for e in events if isinstance(e, BuildFinished)]
        assert [(f.cached, f.error) for f in finished] == [(True, None)]
        record = run.to_record()
        assert record["build"]["cached"] is True
        assert record["build"]["total_steps"] == 0
        text = _text.render(record)
        assert f"image {info.tag}: cached" in text.splitlines()
        html = _html.render(record)
        assert "cached" in html and "<progress" not in html
        seen, live = _live_views(events)
        assert live["build"]["steps"] == [] and live["build"]["cached"] is True
        for rendered in (text, html, *seen):
            assert "<progress" not in rendered
            assert "step 0" not in rendered and "0 steps" not in rendered

    def test_bad_package_is_one_line_naming_it(self, bad_package):
        err, _ = bad_package
        assert err.package == BAD
        assert len(str(err).splitlines()) == 1
        assert repr(BAD) in str(err)
        assert MISSING_LINE in err.log  # the API user still has the failing step's log
        assert err.record["attempts"] == 0
        assert "attempts" not in _text.render(err.record).splitlines()[0]

    def test_bad_package_log_shows_once_below_the_error(self, bad_package):
        err, events = bad_package
        record = err.record
        text = _text.render(record)
        assert text.count(MISSING_LINE) == 1
        assert text.count(str(err)) == 1
        assert text.index(str(err)) < text.index(MISSING_LINE)
        html = _html.render(record)
        assert html.count(MISSING_LINE) == 1
        log_block = html[html.index("<details><summary>build log</summary>") :]
        assert MISSING_LINE in log_block  # collapsed: a closed <details>
        assert html.count(str(err).replace("'", "&#x27;")) == 1
        seen, live = _live_views(events)
        assert BAD in live["build"]["error"]
        assert seen[-1].count(MISSING_LINE) == 1
        assert "<details><summary>build log</summary>" in seen[-1]  # collapsed until opened
        assert format_error(err) == f"InvalidPackageError: {err}"


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_bad_package_in_a_cell_shows_one_error_line_and_the_log_once(shell, docker_engine, capsys):
    result = shell.run_cell(f"%%sandbox --packages six {BAD}\nimport six")
    assert isinstance(result.error_in_exec, InvalidPackageError)
    out = capsys.readouterr()
    shown = out.out + out.err
    assert shown.count(MISSING_LINE) == 1
    error_lines = [line for line in shown.splitlines() if "InvalidPackageError" in line]
    assert len(error_lines) == 1 and BAD in error_lines[0]
    assert "0 attempts" not in shown


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_other_build_failure_is_one_line_naming_the_step_and_its_last_words(docker_engine):
    sandbox = create("bad-step", code="", additional_commands=["echo jsbx-marker-7 && exit 3"])
    with pytest.raises(ImageBuildError) as info:
        sandbox.run()
    err = info.value
    assert not isinstance(err, InvalidPackageError)
    assert str(err).splitlines() == [str(err)]
    assert re.fullmatch(
        r"image build failed at step \d+ of \d+ \(running echo jsbx-marker-7 && exit 3\): "
        r"jsbx-marker-7 \(exit code 3\)",
        str(err),
    ), str(err)
    assert err.log.startswith("Step ")  # the failing step's log, for the API user
    assert _text.render(err.record).count("jsbx-marker-7 (exit code 3)") == 1


def _cell_messages(client: Any, code: str) -> list[dict[str, Any]]:
    """Every iopub message one cell sends, up to its idle status."""
    msg_id = client.execute(code)
    seen = []
    while True:
        msg = client.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        seen.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return seen


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_in_a_kernel_the_live_step_names_the_install_and_a_bad_package_is_one_line(
    docker_engine,
):
    """What a notebook receives: the live record's step names the install (never our proxy
    settings), and a bad package's cell ends with a one-line error and its log once per view."""
    _six_from_scratch(docker_engine)
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        client.execute_interactive("%load_ext jupyter_sandbox", timeout=60)
        good = _cell_messages(client, "%%sandbox --packages six\nimport six")
        bad = _cell_messages(client, f"%%sandbox --packages six {BAD}\nimport six")
    finally:
        manager.shutdown_kernel(now=False)
        client.stop_channels()
    builds = [
        m["content"]["data"][RUN_MIME]["build"]
        for m in good
        if m["msg_type"] in ("display_data", "update_display_data")
    ]
    live = [b for b in builds if b and b.get("running") and b["steps"]]
    assert "installing six (uv)" in [b["steps"][-1] for b in live], live
    assert not any("SSL_CERT_FILE" in b["steps"][-1] + b["line"] for b in live)
    assert not [m for m in good if m["msg_type"] == "error"]

    (error,) = [m["content"] for m in bad if m["msg_type"] == "error"]
    assert error["ename"] == "InvalidPackageError"
    assert len(error["traceback"]) == 1 and repr(BAD) in error["traceback"][0]
    finals = [m["content"]["data"] for m in bad if m["msg_type"] == "update_display_data"]
    assert finals, "the live record was not replaced by the final one"
    for mime in ("text/plain", "text/html"):
        assert finals[-1][mime].count(MISSING_LINE) == 1, mime
        assert error["evalue"] not in finals[-1][mime], mime  # the error output says it, once
    assert "attempts" not in finals[-1]["text/plain"].splitlines()[0]
