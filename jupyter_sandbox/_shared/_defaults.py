"""Every default jupyter-sandbox runs with, in one place.

`Limits`, `Keep`, `Resources`, ``create()``, the container pool, the store, `CodeModeAgent`,
the orchestrators and the magics' options and ``%config`` settings read their defaults here
(their help texts too), and the documentation's table of defaults is generated from this
module (``docs/conf.py``): a default changed here changes everywhere it is said. A shared
module: it imports no package of ours.

A name says one thing. A default is named for the parameter it fills (`MAX_STACK_DEPTH` fills
``max_stack_depth``; `SANDBOX_TIMEOUT` fills ``create(timeout=...)``); the most a parameter
accepts, or a run holds, is a ceiling, named ``*_CEILING`` (`DISPLAYS_CEILING` here;
``STACK_DEPTH_CEILING`` beside the check that enforces it). Sizes are megabytes, the unit the
docs give, for the orchestration's limits and the store's caps; a size in another unit says so
in its name (`ORCHESTRATOR_MAX_MEMORY_BYTES`: bytes, as Flyte counts them), and a container's
is Docker's size text (``"1g"``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, TypeVar

T = TypeVar("T")

# -- %%orchestrate / orchestrate(): Limits -------------------------------------------------

TIMEOUT = 30.0
"""`Limits.timeout`: seconds of Monty compute time a run may use (time in tools not counted),
and the most it may sleep in total."""
MAX_MEMORY = 256
"""`Limits.max_memory`: megabytes of Monty heap."""
MAX_CALLS = 100_000
"""`Limits.max_calls`: tool calls per run."""
MAX_RESULT = 16
"""`Limits.max_result`: megabytes the run's value may take once written out."""
MAX_OUTPUT = 8
"""`Limits.max_output`: megabytes of text a run may print."""
MAX_STACK_DEPTH = 1000
"""`Limits.max_stack_depth`: function calls nested at once (Monty's own default)."""
MAX_TRANSFER = 1024
"""`Limits.max_transfer`: megabytes of tool arguments a run may copy out to the host."""

# -- what is kept of tool values: Keep ----------------------------------------------------

KEEP_VALUE = 1
"""`Keep.value`: megabytes of one tool value kept whole (a larger one: a summary)."""
KEEP_RUN = 64
"""`Keep.run`: megabytes of tool values one run's trace and journal keep."""
KEEP_KERNEL = 256
"""`Keep.kernel`: megabytes of tool values the kernel's journals and cache keep."""
STORE_RUN = 128
"""`Keep.store_run`: megabytes one run may write to the durable store."""
STORE_CELL = 256
"""`Keep.store_cell`: megabytes the store keeps of one cell's runs."""
STORE_TOTAL = 1024
"""`Keep.store_total`: megabytes the store keeps in all (ended runs are evicted first)."""

# -- the durable store --------------------------------------------------------------------

STORE_ENV = "JUPYTER_SANDBOX_STORE"
"""The environment variable naming the store's path."""
STORE_PATH = "~/.local/share/jupyter-sandbox/store.sqlite"
"""The store's path when `STORE_ENV` is unset (`default_store_path`)."""


def default_store_path() -> Path:
    """``$JUPYTER_SANDBOX_STORE`` if set, else ``~/.local/share/jupyter-sandbox/store.sqlite``."""
    return Path(os.environ.get(STORE_ENV) or STORE_PATH).expanduser()


def store_or_default(store: T | None, *, needed: bool) -> T | Path | None:
    """The store an entry point runs with: the one given; else, where the call ``needed`` one,
    the default store (`default_store_path`); else none. ``""`` is "no store" everywhere.

    The one rule, by entry point: a store is opened by default only where the call cannot do
    its job without one. ``resume_run``/``fork_run`` read a stored run, the ``%%orchestrate``
    magic keeps every cell resumable across a kernel restart (what a notebook user wants by
    default), `CodeModeAgent` needs one to pause at a gated tool without an approver; a plain
    ``orchestrate()`` call writes no file it was not asked to (``store=``): a library call
    leaves no state behind by default."""
    if store is None:
        return default_store_path() if needed else None
    return store or None


# -- %%sandbox / create(): Resources and the run ------------------------------------------

CPU = 1.0
"""`Resources.cpu`: CPUs of one container."""
MEMORY = "1g"
"""`Resources.memory`: memory limit of one container."""
PIDS = 256
"""`Resources.pids`: processes one container may run at once (fork bombs stop here)."""
DISK = "256m"
"""`Resources.disk`: size of each of a container's tmpfs, ``/tmp`` and ``/var/outputs``."""
OUTPUT = "4m"
"""`Resources.output`: stdout and stderr kept before the run is stopped."""
SANDBOX_TIMEOUT = 600.0
"""``create(timeout=...)``: seconds a container may run before it is stopped."""
RETRIES = 0
"""``create(retries=...)``: re-runs of a failed container before its error surfaces."""
DISPLAYS_CEILING = 200
"""The most displays (figures, tables, ``display()`` calls) one sandbox run shows: each is an
output of the cell, saved in the notebook, so a loop that displays 10,000 times would make it
unusable; past this many, one line says how many were left out."""
NETWORK: Final = "none"
"""``create(network=...)``: no network for the code unless asked (``"bridge"``)."""
CA_BUNDLE: Final = ""
"""``create(ca_bundle=...)``, ``--ca-bundle``, ``%config SandboxMagics.ca_bundle``: the PEM file
of CAs the code's HTTPS trusts; empty, none: the code trusts the image's own CAs (and a
build, the host's bundle)."""
LINK_LIMIT = "100m"
"""``%config SandboxMagics.link_limit``: bytes of `File`/`Dir` outputs one ``%%sandbox`` cell
links into ``sandbox-outputs/`` beside the notebook (a notebook's folder is often synced or
committed); a bigger one stays in its temp folder, with a one-line note."""
TOOL_CONCURRENCY = 4
"""``tool(sandbox, concurrency=...)``: containers one sandbox tool runs at once when the code
fans out."""

# -- the container pool -------------------------------------------------------------------

SPARE_IDLE = 300.0
"""Seconds a spare container waits for a run of its image and limits; then it is removed."""
MAX_SPARES = 16
"""Spare containers kept at most, all images and limits together."""

# -- an MCP server's tools: tools_from_mcp() ----------------------------------------------

MCP_CONNECT_TIMEOUT = 30.0
"""``tools_from_mcp(timeout=...)``: seconds a server has to start and list its tools."""
MCP_CALL_TIMEOUT = 300.0
"""``tools_from_mcp(call_timeout=...)``: seconds one call of a server's tool may wait for its
answer; then it fails with ``TimeoutError`` (the code may catch it) and the server is told to
stop the request. A default, not a ceiling: any positive number of seconds may be given."""

# -- code mode and orchestrators -----------------------------------------------------------

MAX_ATTEMPTS = 3
"""`CodeModeAgent(max_attempts=...)`: model replies tried before `CodeModeError`."""
ORCHESTRATOR_NAME = "sandboxed-code"
"""``orchestrator_from_str(name=...)``: Flyte's default name for a code string's orchestrator
(its ``name``; its ``key``, what code calls it by, is the identifier ``sandboxed_code``)."""
ORCHESTRATOR_TIMEOUT_MS = 30_000
"""``@orchestrator(timeout_ms=...)``: Flyte's default for a sandboxed orchestrator."""
ORCHESTRATOR_MAX_MEMORY_BYTES = 50 * 1024 * 1024
"""``@orchestrator(max_memory=...)``: Flyte's default, in bytes as Flyte counts it."""
ORCHESTRATOR_MAX_STACK_DEPTH = 256
"""``@orchestrator(max_stack_depth=...)``: Flyte's default."""
