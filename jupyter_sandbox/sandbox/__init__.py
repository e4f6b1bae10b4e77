"""The Docker engine behind ``%%sandbox`` and `jupyter_sandbox.create` (no IPython here).

Layers, low to high: `_spec` (normalised definition, image hash, Dockerfile), `_build` and
`_image` (streamed builds), `_io` and `_codec` (typed values as files), `_run` (one safe
container run), `_cache` (results), `_sandbox` (`create`, `Sandbox`). ``docker`` is imported
lazily by `_client`, so importing this package does not need an engine.
"""

from __future__ import annotations

from ._baseimage import DEFAULT_BASE_IMAGE, build_base_image
from ._build import BuildInfo
from ._image import BASE_IMAGE_ENV, default_base_image
from ._manage import list_images, prune, reap_orphans
from ._record import MIME_TYPE, SandboxRun
from ._sandbox import DEFAULT_TIMEOUT, Sandbox, create
from ._spec import ImageSpec, Resources
from ._types import Dir, File

__all__ = [
    "BASE_IMAGE_ENV",
    "DEFAULT_BASE_IMAGE",
    "DEFAULT_TIMEOUT",
    "MIME_TYPE",
    "BuildInfo",
    "Dir",
    "File",
    "ImageSpec",
    "Resources",
    "Sandbox",
    "SandboxRun",
    "build_base_image",
    "create",
    "default_base_image",
    "list_images",
    "prune",
    "reap_orphans",
]
