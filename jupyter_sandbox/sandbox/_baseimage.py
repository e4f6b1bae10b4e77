"""A Python base image built on the host, with no container registry.

A host without registry access (air-gapped, or behind a proxy) cannot pull ``python:3.x-slim``,
so the base is bootstrapped from the Debian mirror apt already uses: ``debootstrap`` a minimal
root filesystem, import it as an image, then finish it with a short offline build (a venv with
``uv`` from a wheel the host downloads, a non-root user, an environment without the host's).
Built once per engine: when the tag exists, nothing happens.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .._shared._errors import ImageBuildError
from .._shared._events import BuildLog, BuildStep, Event
from .._shared._owner import temp_prefix
from ._build import build_image, image_exists
from ._client import KIND, LABEL, client, engine_of
from ._hostcfg import debian_mirror

if TYPE_CHECKING:
    from docker import DockerClient

DEFAULT_BASE_IMAGE = "jupyter-sandbox/base:bookworm"
"""The image ``python -m jupyter_sandbox base-image`` builds, with no registry (Debian 12)."""
SUITE = "bookworm"
SANDBOX_UID = 1000
"""The non-root user every run uses (``sandbox`` in the local base; numeric, so any image works)."""
PACKAGES = ("python3", "python3-venv", "ca-certificates")
BUILD_TOOLS = ("gcc", "make", "libc6-dev")

_FINISH = f"""\
FROM {{rootfs}}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install --no-index --no-cache-dir /tmp/wheels/*.whl \\
 && rm -rf /tmp/wheels /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && echo 'sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/tmp:/usr/sbin/nologin' >> /etc/passwd \\
 && echo 'sandbox:x:{SANDBOX_UID}:' >> /etc/group
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    VIRTUAL_ENV=/opt/venv HOME=/tmp LANG=C.UTF-8 \\
    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /tmp
USER {SANDBOX_UID}:{SANDBOX_UID}
CMD ["python3"]
"""


def _say(log: Callable[[str], None]) -> Callable[[Event], None]:
    def on_event(event: Event) -> None:
        if isinstance(event, BuildStep):
            log(f"step {event.index}/{event.total}: {event.text}")
        elif isinstance(event, BuildLog):
            log(f"  {event.line}")

    return on_event


def _run(cmd: list[str], log: Callable[[str], None]) -> None:
    log("$ " + " ".join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageBuildError(f"{cmd[0]} failed ({done.returncode})", log=done.stderr[-4000:])


def tag_import(docker: DockerClient, response: object, tag: str) -> None:
    """Make sure an imported image carries ``tag``: Podman's import (4.3) ignores the tag it is
    given (the image is ``<repository>:latest``); its response names the image's id."""
    if image_exists(docker, tag):
        return
    found = re.findall(r"sha256:[0-9a-f]{64}", str(response))
    if not found:
        raise ImageBuildError(f"the engine's import named no image: {str(response)[-300:]}")
    repository, _, version = tag.rpartition(":")
    docker.api.tag(found[-1], repository, version)


def build_base_image(
    tag: str = DEFAULT_BASE_IMAGE,
    *,
    build_tools: bool = False,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> bool:
    """Build ``tag`` unless it exists; True when a build happened. Needs root and debootstrap."""
    docker = client()
    from docker.errors import ImageNotFound

    if image_exists(docker, tag) and not force:
        log(f"base image {tag} already exists")
        return False
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: apt-get install debootstrap")
    repository, _, version = tag.rpartition(":") if ":" in tag else (tag, "", "latest")
    rootfs_tag = f"{repository}-rootfs:{version}"
    labels = {LABEL: "1", KIND: "base"}
    with tempfile.TemporaryDirectory(prefix=temp_prefix("base")) as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        mirror = debian_mirror()
        include = ",".join(PACKAGES + (BUILD_TOOLS if build_tools else ()))
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={include}",
                SUITE,
                str(rootfs),
                mirror,
            ],
            log,
        )
        tarball = work / "rootfs.tar"
        _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], log)
        shutil.rmtree(rootfs)
        log(f"importing root filesystem as {rootfs_tag}")
        imported = docker.api.import_image_from_file(
            str(tarball), repository=f"{repository}-rootfs", tag=version
        )
        tag_import(docker, imported, rootfs_tag)
        tarball.unlink()
        context = work / "context"
        (context / "wheels").mkdir(parents=True)
        wheels = str(context / "wheels")
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, "uv"],
            log,
        )
        info = build_image(
            docker,
            context,
            _FINISH.format(rootfs=rootfs_tag),
            tag=tag,
            on_event=_say(log),
            labels=labels,
            network_mode="none",
        )
    if info.error is not None:
        raise ImageBuildError(f"base image build failed at {info.error}", log=info.failed_log)
    docker.images.remove(rootfs_tag)
    if engine_of(docker).name == "podman" and version != "latest":  # see `tag_import`
        with contextlib.suppress(ImageNotFound):
            docker.images.remove(f"{repository}-rootfs:latest")
    log(f"built base image {tag} in {info.seconds:.1f} s (plus debootstrap)")
    return True
