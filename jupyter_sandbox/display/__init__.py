"""Showing runs: live widgets in Jupyter, MIME bundles for saved notebooks, text elsewhere.

The magics create a view per cell and feed it engine events::

    view = OrchestrateView(quiet=False)   # or SandboxView
    view.on_event(event)                  # any thread
    view.finish(record)                   # once, with the engine's JSON record

Engines never import this package; it imports IPython only when it is live. No widget is made:
the live view is the final display's own MIME bundle, updated in place (see `_live`).
"""

from __future__ import annotations

from jupyter_sandbox.records import RUN_MIME, TRACE_MIME

from ._codegen import CodeGenView
from ._codemode import CodeModeView
from ._format import size_text
from ._mime import bundle
from ._rich import display_bundle, show_displays
from ._views import OrchestrateView, SandboxView, shown_pause

__all__ = [
    "RUN_MIME",
    "TRACE_MIME",
    "CodeGenView",
    "CodeModeView",
    "OrchestrateView",
    "SandboxView",
    "bundle",
    "display_bundle",
    "show_displays",
    "shown_pause",
    "size_text",
]
