"""The Docker engine behind ``%%sandbox`` and `jupyter_sandbox.create` (no IPython here).

Layers, low to high:

- `_client` (the engine connection, our labels; imports ``docker`` lazily, so importing this
  package needs no engine), `_types` and `_codec` (declared types, values as files; `_auto_io`
  is the auto-IO program that runs inside the container);
- `_spec` (normalised definition, image hash, Dockerfile), `_hostcfg` (what a build borrows
  from the host), `_build`, `_image` and `_baseimage` (streamed builds, the local base);
- `_pool` (containers started ahead, confined, always removed), `_watchdog` (removes them when
  the kernel dies), `_io` (staging inputs, collecting outputs), `_secrets` (masking), `_attach`
  (a container's own process, attached before its start), `_scripts` (the ``sh`` scripts a
  container runs), `_warm` (a spare's interpreter, waiting for its program on the attach
  stream), `_container` (one run in one container);
- `_allowlist`, `_egress` and `_guard` (``network=[hosts]``: the checked allow-list, the
  Squid proxy on an internal network that enforces it, and the packet filter in the proxy's
  namespace that keeps it off addresses that appear later); `_requests` (what a run sent out,
  read from the proxy's log); `_inject` (`Secret`: a secret the proxy adds to its hosts'
  requests, the container holding a placeholder);
- `_cache` (results), `_record` (`SandboxRun`, the run's record), `_sandbox` (`create`,
  `Sandbox`: every entry point's one path); `_manage` (list, prune, reap) stands beside them;
- `_session` (``create_session``: one container that keeps its Python state across cells),
  `_session_server` (its program, inside the container) and `_kept` (sessions that outlive
  the kernel, their tokens and snapshots);
- `_cluster` (``create(cluster=...)``: a run sent to a Dask worker) and `_on_worker` (what the
  worker runs: `_image` and `_container` on its own engine, files in and out as bytes).
"""

from __future__ import annotations

from .._shared._public import publish_top_level
from ..records import RUN_MIME
from ._allowlist import allow_list as allow_list
from ._baseimage import DEFAULT_BASE_IMAGE, build_base_image
from ._build import BuildInfo

# The front door for the other packages (not public API: not in __all__).
from ._engine import UNENFORCED_ENV as UNENFORCED_ENV
from ._engine import Engine as Engine
from ._engine import choose as choose
from ._engine import engine_choice as engine_choice
from ._engine import engine_from as engine_from
from ._engine import limits_accepted as limits_accepted
from ._engine import limits_fix as limits_fix
from ._engine import supports_gvisor as supports_gvisor
from ._hostcfg import read_ca_bundle as read_ca_bundle
from ._image import BASE_IMAGE_ENV, default_base_image
from ._inject import Secret
from ._inject import parse_secret_for as parse_secret_for
from ._isolation import ISOLATION_ENV as ISOLATION_ENV
from ._isolation import REGISTER as REGISTER
from ._isolation import RUNTIMES as RUNTIMES
from ._isolation import Isolation as Isolation
from ._isolation import isolation_level as isolation_level
from ._manage import list_images, prune, reap_orphans
from ._manage import reap_folders as reap_folders
from ._record import SandboxRun
from ._sandbox import DEFAULT_TIMEOUT, Sandbox, create
from ._session import SandboxSession, create_session
from ._session import SessionSpec as SessionSpec
from ._session import close_sessions as close_sessions
from ._session import get_session as get_session
from ._session import lost_sessions as lost_sessions
from ._session import reattach_session as reattach_session
from ._session import session_env as session_env
from ._session import session_spec as session_spec
from ._session import session_value as session_value
from ._session import sessions as sessions
from ._session import set_session_notebook as set_session_notebook
from ._session import snapshot_of as snapshot_of
from ._session import start_session as start_session
from ._session import start_session_from as start_session_from
from ._spec import ImageSpec, Resources
from ._spec import parse_size as parse_size
from ._types import Dir, File

MIME_TYPE = RUN_MIME
"""The run record's MIME type (`jupyter_sandbox.records.RUN_MIME`, kept under its old name)."""

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
    "SandboxSession",
    "Secret",
    "build_base_image",
    "create",
    "create_session",
    "default_base_image",
    "list_images",
    "prune",
    "reap_orphans",
]

publish_top_level(__name__, globals())
