"""Masking, in an orchestration, the secrets its sandbox tools return.

A sandbox's secret reaches its container's code, which may write it to an output; a sandbox
tool then returns that output to the orchestration code as the notebook would get it: the
real value, the code's to use (it may hand it to another tool or sandbox). What the
orchestration shows or keeps of it is masked, as the sandbox's own record is: the printed
stream (live and in ``result.stdout``), the run's record (its value, every call's arguments,
result, error and host traceback, the run's error and Monty traceback) and the error raised.
``result.value`` and the calls' values themselves stay real, as do a journal's and a store's
copies (they replay the run; a store keeps plain data only, sealed and 0600); a notebook cell
shows a value holding a secret as ``*** (holds a secret value)`` (`shown_value`), while
``--out`` gets the real value, as ``%%sandbox`` does.

The secrets are learnt as the tools return (`note`): a run holds a `Scrub`, found by the
sandbox tool through the context the run's tools run in; a run nested in a tool passes what it
learns to the run it is nested in, which may receive the value from that tool. A later run may
get the value again without calling the tool (a journal or a cache answers the call, a session
variable holds it), so every run of the process masks, from its start, every secret a sandbox
tool has returned in the process so far (`_returned`). Nothing is imported from the Docker
side until a sandbox tool has returned a secret.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._errors import OrchestrationError

if TYPE_CHECKING:
    from ..sandbox._secrets import StreamMasker

scrubbing: contextvars.ContextVar[Scrub | None] = contextvars.ContextVar(
    "jupyter_sandbox_scrub", default=None
)
"""The `Scrub` of the run whose tool is executing (set on the run's thread; an async tool's
task inherits it)."""
_returned: dict[str, None] = {}
"""Every secret a sandbox tool has returned to orchestration code in this process, in order."""
_Record = TypeVar("_Record")


class Scrub:
    """The secrets one run has received from its sandbox tools, and masking by them."""

    def __init__(self, parent: Scrub | None = None) -> None:
        self.secrets: tuple[str, ...] = ()
        """The secrets' values (raw: `_secrets.forms` adds their escaped spellings)."""
        self._parent = parent
        self._stream: StreamMasker | None = None
        if _returned:
            self.add(tuple(_returned))

    def add(self, secrets: Iterable[str]) -> None:
        """Mask ``secrets`` from now on, here and in the run this one is nested in."""
        new = tuple(s for s in secrets if s and s not in self.secrets)
        if not new:
            return
        from ..sandbox._secrets import StreamMasker  # only once a sandbox returned a secret

        self.secrets += new
        if self._stream is None:
            self._stream = StreamMasker(new)
        else:
            self._stream.add(new)
        if self._parent is not None:
            self._parent.add(new)

    def stream(self, text: str) -> str:
        """What of the printed ``text`` can be shown now, masked; a piece that may begin a
        secret waits for the next print or `flush` (prints arrive in chunks)."""
        return text if self._stream is None else self._stream.feed_text(text)

    def flush(self) -> str:
        """The rest of the printed stream, at the end of the run."""
        return "" if self._stream is None else self._stream.flush()

    def error(self, error: OrchestrationError) -> None:
        """Mask the message and tracebacks (Monty's, a `ToolError`'s host one) of ``error``
        before it is shown."""
        if self.secrets:
            from ..sandbox._secrets import mask_cut, mask_error

            mask_error(error, self.secrets)
            for name in ("sandbox_traceback", "host_traceback"):
                text = getattr(error, name, None)
                if isinstance(text, str) and text:
                    setattr(error, name, mask_cut(text, self.secrets))


def note(secrets: Iterable[str]) -> None:
    """A sandbox tool returned a value holding ``secrets``: the run calling it masks them."""
    secrets = tuple(s for s in secrets if s)
    _returned.update(dict.fromkeys(secrets))
    scrub = scrubbing.get()
    if scrub is not None:
        scrub.add(secrets)


def mask_record(record: _Record, secrets: tuple[str, ...]) -> _Record:
    """A JSON-safe ``record`` with every text in it masked (cut-aware: previews are cut)."""
    if not secrets:
        return record
    from ..sandbox._secrets import mask_cut

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return mask_cut(item, secrets)
        if isinstance(item, dict):
            return {key: walk(value) for key, value in item.items()}
        if isinstance(item, list):
            return [walk(value) for value in item]
        return item

    return cast(_Record, walk(record))


def shown_value(value: Any, secrets: tuple[str, ...]) -> Any:
    """What a notebook cell shows as its value (``Out[]``, which notebooks save): ``value``,
    or a stand-in whose repr says it holds a secret when it does."""
    if not secrets:
        return value
    from ..sandbox._secrets import Hidden, holds_secret

    return Hidden() if holds_secret(value, secrets) else value
