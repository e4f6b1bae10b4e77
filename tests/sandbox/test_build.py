"""Environment images against the real engine: builds through the host's proxy, content-addressed
tags, streamed steps, and errors that name the bad package.

Builds fetch from PyPI/Debian, so package lists stay tiny and images are shared per session.
"""

from __future__ import annotations

import contextlib

import docker.errors
import pytest

from jupyter_sandbox import ImageBuildError, InvalidPackageError, create
from jupyter_sandbox.events import BuildFinished, BuildLog, BuildStarted, BuildStep
from jupyter_sandbox.sandbox import list_images, prune

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]


@pytest.fixture(scope="session")
def six_run(docker_engine):
    """One build, from scratch, of two tiny pure-Python packages, shared by the tests below."""
    events = []
    code = "import six\nversion = six.__version__"
    sandbox = create("six", code=code, outputs={"version": str}, packages=["six", "idna"])
    base_id = docker_engine.images.get(sandbox.image_spec.base).id
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_engine.images.remove(sandbox.image_spec.tag(base_id), force=True)
    return sandbox.execute({}, on_event=events.append), events


def test_packages_install_with_uv_through_the_host_proxy(six_run):
    run, _ = six_run
    assert run.value.count(".") >= 1
    assert run.image.startswith("jupyter-sandbox/env:")
    assert "installing idna, six (uv)" in run.build.steps
    assert "uv pip install" in run.build.log


def test_build_streams_numbered_steps(six_run):
    run, events = six_run
    assert not run.build.cached
    started = [e for e in events if isinstance(e, BuildStarted)]
    steps = [e for e in events if isinstance(e, BuildStep)]
    assert len(started) == 1
    assert [s.index for s in steps] == list(range(1, started[0].total_steps + 1))
    assert {s.total for s in steps} == {started[0].total_steps}
    assert any(isinstance(e, BuildLog) for e in events)
    finished = [e for e in events if isinstance(e, BuildFinished)]
    assert len(finished) == 1
    assert finished[0].error is None


def test_same_spec_in_another_order_does_not_rebuild(six_run):
    first, _ = six_run
    events = []
    again = create("six-again", code="import idna, six", packages=["IDNA", "six", "six"]).execute(
        {}, on_event=events.append
    )
    assert again.image == first.image
    assert again.build.cached
    assert not any(isinstance(e, BuildStep) for e in events)
    assert again.to_record()["build"]["cached"] is True


def test_build_settings_do_not_reach_runs(six_run):
    run, _ = six_run
    sandbox = create("env", command=["env"], image=run.image)
    env = sandbox.execute({}).stdout
    for name in ("SSL_CERT_FILE", "UV_NATIVE_TLS", "PIP_CERT", "UV_INDEX_URL"):
        assert name not in env


def test_editing_code_reuses_the_image(six_run):
    run, _ = six_run
    other = create("six-edit", code="import six\nx = 1", packages=["six", "idna"]).execute({})
    assert other.image == run.image
    assert other.build.cached


def test_missing_pip_package_is_named(docker_engine):
    with pytest.raises(InvalidPackageError) as info:
        create("bad-pip", code="", packages=["six", "jsbx-no-such-package-4242"]).run()
    err = info.value
    assert err.package == "jsbx-no-such-package-4242"
    assert "jsbx-no-such-package-4242" in str(err)
    assert err.record["build"]["error"]
    assert err.record["status"] == "error"


def test_missing_apt_package_is_named(docker_engine):
    with pytest.raises(InvalidPackageError) as info:
        create("bad-apt", code="", system_packages=["jsbx-no-such-apt-4242"]).run()
    assert info.value.package == "jsbx-no-such-apt-4242"
    assert "Unable to locate package" in info.value.log


def test_system_packages_install(docker_engine):
    sandbox = create(
        "jq",
        command=["bash", "-c", "jq -r .name /var/inputs/doc > /var/outputs/name"],
        inputs={"doc": dict},
        outputs={"name": str},
        system_packages=["jq"],
    )
    assert sandbox.run(doc={"name": "sandbox"}) == "sandbox\n"


def test_other_build_failures_show_the_failing_step_log(docker_engine):
    sandbox = create("bad-cmd", code="", additional_commands=["echo jsbx-marker && exit 3"])
    with pytest.raises(ImageBuildError) as info:
        sandbox.run()
    assert not isinstance(info.value, InvalidPackageError)
    assert "jsbx-marker" in info.value.log
    assert "Step" in info.value.log.splitlines()[0]  # starts at the failing step


def test_images_are_labelled_listed_and_pruned(docker_engine):
    marker = create("prune-me", code="", additional_commands=["true jsbx-prune-test"]).execute({})
    tags = {tag for row in list_images() for tag in row["tags"]}
    assert marker.image in tags
    assert "jupyter-sandbox/base:bookworm" in tags
    removed = prune()
    assert marker.image in removed
    assert "jupyter-sandbox/base:bookworm" not in removed


def test_missing_version_is_named(docker_engine):
    with pytest.raises(InvalidPackageError) as info:
        create("bad-version", code="", packages=["six==0.0.1"]).run()
    assert info.value.package == "six==0.0.1"


def test_cli_base_image_is_idempotent_and_images_lists_it(capsys):
    from jupyter_sandbox.__main__ import main

    assert main(["base-image"]) == 0
    assert "already exists" in capsys.readouterr().out
    assert main(["images"]) == 0
    assert "jupyter-sandbox/base:bookworm" in capsys.readouterr().out
