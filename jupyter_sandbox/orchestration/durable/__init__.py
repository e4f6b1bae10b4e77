"""The durable subsystem: runs that outlive the kernel.

A run given a store writes its calls' records and Monty snapshots as it goes (`Durable`,
plugged into the run loop as a `DurableFeature`, see `.._hooks`), so it can be resumed after
a restart, paused at a gated call until a person answers, listed and forked. Its modules:

- ``_store``: the `Store` (one SQLite file per user), with its schema and migrations
  (``_schema``), sealing and key files (``_sealing``), the pickling of values (``_pickling``)
  and the caps that evict old runs (``_caps``);
- ``_durable``: what a run writes, when, and what a resumed run starts from (`Restore`);
- ``_paused``: the listing of paused runs and the call an approval will make;
- ``_resume``: a durable run begun (`begin`), a stored run readied to be taken up again
  (`take_up`) or forked (`fork`): what the plan (``.._plan``) makes their drivers from;
- ``_sessions``: ``--session`` state, kept in memory and in the store (`SessionLink` is the
  run's feature); ``_rebind``: handles bound again after a restore, by name; ``_cbor``: the
  few fields of a Monty dump we edit (limits, the type checker's state).

The rest of ``orchestration`` imports these names from here, the package's front door.
"""

from __future__ import annotations

from ..._shared._public import publish_top_level
from ._durable import CHECKPOINT_EVERY as CHECKPOINT_EVERY
from ._durable import INPUTS as INPUTS
from ._durable import Durable as Durable
from ._durable import DurableFeature as DurableFeature
from ._durable import Restore as Restore
from ._durable import Restored as Restored
from ._durable import changed_inputs as changed_inputs
from ._durable import held as held
from ._durable import inputs_changed as inputs_changed
from ._durable import inputs_record as inputs_record
from ._durable import open_store as open_store
from ._durable import stored_calls as stored_calls
from ._durable import stored_inputs as stored_inputs
from ._durable import unkept_inputs as unkept_inputs
from ._paused import CallNow as CallNow
from ._paused import PausedRun as PausedRun
from ._paused import call_now as call_now
from ._paused import paused_runs as paused_runs
from ._paused import read_whole as read_whole
from ._paused import run_status as run_status
from ._paused import unseen as unseen
from ._rebind import defined_classes as defined_classes
from ._rebind import stored_origins as stored_origins
from ._resume import Taken as Taken
from ._resume import begin as begin
from ._resume import driven as driven
from ._resume import fork as fork
from ._resume import take_up as take_up
from ._sessions import SessionLink as SessionLink
from ._sessions import sessions as sessions
from ._sessions import with_limits as with_limits
from ._store import KEY_BYTES as KEY_BYTES
from ._store import RunOwner as RunOwner
from ._store import RunStatus as RunStatus
from ._store import Store as Store
from ._store import StoredRun as StoredRun
from ._store import check_private_file as check_private_file
from ._store import check_private_folder as check_private_folder
from ._store import default_store_path as default_store_path
from ._store import this_process as this_process

__all__ = ["Store", "default_store_path"]

# `Store` is `jupyter_sandbox.Store` however the subsystem was first loaded (`orchestration`
# hands these names on lazily, and the magics reach `open_store` before anyone names `Store`).
publish_top_level("jupyter_sandbox.orchestration", globals())
