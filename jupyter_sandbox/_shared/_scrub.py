"""Masking, in an orchestration, the secrets its sandbox tools return.

A sandbox's secret reaches its container's code, which may write it to an output; a sandbox
tool then returns that output to the orchestration code as the notebook would get it: the
real value, the code's to use (it may hand it to another tool or sandbox). What the
orchestration shows or keeps of it is masked, as the sandbox's own record is: the printed
stream (live and in ``result.stdout``), the live trace's call previews (`known`, read by
`display._live`), the run's record (its value, every call's arguments, result, error and host
traceback, the run's error and Monty traceback) and the error raised. ``result.value`` and the
calls' values themselves stay real, as does a journal's copy in memory; a notebook cell shows a
value holding a secret as ``*** (holds a secret value)`` (`shown_value`), while ``--out`` gets
the real value, as ``%%sandbox`` does.

A durable store (a file) keeps no value holding a secret (`_durable.keepable`): such a call
result is kept as a `HandleMarker` named `SECRET`, so the call counts as not completed and is
made again on resume, as an object the store could not keep is; so is such an argument or input;
a call's error text is masked; and a checkpoint whose Monty dump holds a secret is not written
(`in_dump`: resuming starts from the one before, taken before the sandbox call), except at a
gated call, whose pause needs it.

The secrets are learnt as the tools return (`note`): a run holds a `Scrub`, found by the
sandbox tool through the context the run's tools run in; a run nested in a tool passes what it
learns to the run it is nested in, which may receive the value from that tool. A later run may
get the value again without calling the tool (a journal or a cache answers the call, a session
variable holds it), so every run of the process masks, from its start, every secret a sandbox
tool has returned in the process so far (`_returned`). A run that may be answered without its
tools (resumed, approved, forked, replayed, cached) may hold a value a sandbox tool returned in
another process (a kernel that died): it masks, from its start, the secrets of the sandbox
tools it may call (`note` with its own `Scrub`, read from the environment as the tools read
them). Nothing is imported from the Docker side until a sandbox tool has returned a secret.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._errors import OrchestrationError

if TYPE_CHECKING:
    from ._secrets import StreamMasker

scrubbing: contextvars.ContextVar[Scrub | None] = contextvars.ContextVar(
    "jupyter_sandbox_scrub", default=None
)
"""The `Scrub` of the run whose tool is executing (set on the run's thread; an async tool's
task inherits it)."""
SECRET = "secret value"
"""The name of the `HandleMarker` a durable store keeps in place of a value holding a secret."""
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
        from ._secrets import StreamMasker  # only once a sandbox returned a secret

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
            from ._secrets import mask_cut, mask_error

            mask_error(error, self.secrets)
            for name in ("sandbox_traceback", "host_traceback"):
                text = getattr(error, name, None)
                if isinstance(text, str) and text:
                    setattr(error, name, mask_cut(text, self.secrets))


def note(secrets: Iterable[str], scrub: Scrub | None = None) -> None:
    """A sandbox tool returned a value holding ``secrets`` (or a run may hold one: see the
    module's docstring): ``scrub`` (by default the run calling the tool) masks them, and every
    later run of the process does."""
    secrets = tuple(s for s in secrets if s)
    _returned.update(dict.fromkeys(secrets))
    scrub = scrubbing.get() if scrub is None else scrub
    if scrub is not None:
        scrub.add(secrets)


def known() -> tuple[str, ...]:
    """Every secret a sandbox tool has returned in this process so far (a live view masks its
    call previews by them: it renders from another thread, outside any run's context)."""
    return tuple(_returned)


def holds(value: Any, secrets: tuple[str, ...]) -> bool:
    """Whether ``value`` holds one of ``secrets`` (`_secrets.holds_secret`)."""
    if not secrets:
        return False
    from ._secrets import holds_secret

    return holds_secret(value, secrets)


def in_dump(dump: bytes, secrets: tuple[str, ...]) -> bool:
    """Whether a Monty dump holds one of ``secrets`` (Monty keeps a text as its UTF-8 bytes)."""
    if not secrets:
        return False
    from ._secrets import forms

    return any(form.encode() in dump for form in forms(secrets))


def masked(text: str | None, secrets: tuple[str, ...]) -> str | None:
    """``text`` (a call's error, cut to a bound) masked, cut-aware."""
    if not secrets or not text:
        return text
    from ._secrets import mask_cut

    return mask_cut(text, secrets)


def mask_record(record: _Record, secrets: tuple[str, ...]) -> _Record:
    """A JSON-safe ``record`` with every text in it masked (cut-aware: previews are cut)."""
    if not secrets:
        return record
    from ._secrets import CutMasker

    mask = CutMasker(secrets)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return mask(item)
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
    from ._secrets import Hidden, holds_secret

    return Hidden() if holds_secret(value, secrets) else value
