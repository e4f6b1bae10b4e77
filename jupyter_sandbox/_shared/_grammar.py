"""The exact grammar of what a person or a button puts on an ``%orchestrate_*`` magic's line.

A saved notebook is untrusted input: the JupyterLab renderer builds ``%orchestrate_approve
RUN_ID`` and ``%orchestrate_reject ...`` cells from a saved record's fields, so each field must
be what jupyter-sandbox itself issues, and nothing else, before it reaches a cell or a store
lookup. The renderer (``labextension/src/approval.ts``) checks the same grammar; the magics
check it again, since a person can type any line. No IPython here: engines and tests use it.

- **Run id**: `new_run_id` is the only generator (`Store.new_run` calls it): 12 lowercase hex
  digits, ``[0-9a-f]{12}``. Anything else is refused before a lookup.
- **Reject line**: ``RUN_ID [REASON]``, the reason being the rest of the line as written (one
  pair of outer quotes dropped, as ``--value`` does), or ``--json RUN_ID "JSON string"``: what
  the Reject button writes, so that any reason (newlines, quotes, a trailing backslash, line
  separators IPython would split the cell at) arrives byte for byte.
"""

from __future__ import annotations

import json
import re
import secrets

from ._errors import SandboxConfigError

RUN_ID_BYTES = 6
"""Random bytes of a run id: 12 hex digits, short enough to type, unique per store (checked)."""

RUN_ID = re.compile(f"[0-9a-f]{{{2 * RUN_ID_BYTES}}}")
"""A run id, whole (`re.fullmatch`). The renderer's ``RUN_ID`` is the same pattern."""

DIGEST_CHARS = 16
"""Hex digits of an approved call's digest (`orchestration._approval`; 64 bits: a person
compares them, a forger must match)."""

DIGEST = re.compile(f"[0-9a-f]{{{DIGEST_CHARS}}}")
"""A digest, whole (`re.fullmatch`): what ``%orchestrate_approve --expect`` takes and the
renderer puts on Approve's line. The renderer's ``DIGEST`` is the same pattern."""

JSON_OPTION = "--json"
"""Before the run id of ``%orchestrate_reject``: the reason is a JSON string literal."""

SHOWN = 40
"""Characters of refused input an error repeats (it may be a hostile record's payload, or
100,000 brackets)."""


def new_run_id() -> str:
    """A fresh run id: `RUN_ID_BYTES` random bytes as lowercase hex (`RUN_ID`)."""
    return secrets.token_hex(RUN_ID_BYTES)


def is_run_id(text: object) -> bool:
    """Whether ``text`` is a run id as the store issues them (exactly, no spaces)."""
    return isinstance(text, str) and RUN_ID.fullmatch(text) is not None


def is_digest(text: object) -> bool:
    """Whether ``text`` is a call digest as jupyter-sandbox issues them (exactly)."""
    return isinstance(text, str) and DIGEST.fullmatch(text) is not None


def check_run_id(text: str) -> str:
    """``text`` if it is a run id, else `SandboxConfigError` (parameter ``run_id``) saying what
    one looks like; the refused text is shown cut and escaped, never run or looked up."""
    if is_run_id(text):
        return text
    raise SandboxConfigError(
        f"run_id {shown(text)!r} is not a run id: a run id is 12 hex digits (0-9, a-f), as "
        "%orchestrate_pending lists them",
        parameter="run_id",
    )


def shown(text: str) -> str:
    """``text`` as an error line repeats refused input: at most `SHOWN` characters."""
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def unquote(text: str) -> str:
    """``text`` without one pair of matching outer quotes (``'...'`` or ``"..."``), as a shell
    would drop them; anything else as written."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


_TYPED_REJECT = re.compile(r"(\s*%orchestrate_reject[ \t]+)(?!-)(\S+)[ \t]+(.*\S)[ \t]*(\n?)")


def encode_reject(line: str) -> str:
    """A typed ``%orchestrate_reject RUN_ID REASON`` line whose reason ends in ``?`` as the same
    answer in the ``--json`` form; any other line unchanged. IPython reads a line ending in
    ``?`` as a help request (``why?`` becomes ``%pinfo why``) before any magic sees it: run
    first (an input transformer), this keeps the reason as typed."""
    typed = _TYPED_REJECT.fullmatch(line)
    if typed is None or not typed.group(3).endswith("?"):
        return line
    start, run_id, reason, end = typed.groups()
    return f"{start}{JSON_OPTION} {run_id} {json.dumps(unquote(reason))}{end}"


def parse_reject(line: str) -> tuple[str, str | None]:
    """``%orchestrate_reject``'s line as ``(run_id, reason)`` (reason None: none given).

    ``RUN_ID REASON...``: the reason is the rest of the line after the run id and the spaces
    that follow it, as typed (braces, dollars, backslashes, a leading dash), one pair of outer
    quotes dropped. ``--json RUN_ID "..."``: the reason is the JSON string literal (the form
    the Reject button writes). `SandboxConfigError` for a bad run id or a bad literal."""
    rest = line.strip(" \t")
    option = re.match(re.escape(JSON_OPTION) + r"(\s+|$)", rest)
    encoded = option is not None
    if option is not None:
        rest = rest[option.end() :]
    word = re.match(r"\S*", rest).group()  # type: ignore[union-attr]  # \S* always matches
    if not word:
        raise SandboxConfigError("run_id: required: RUN_ID (%orchestrate_pending lists them)")
    run_id = check_run_id(word)
    text = rest[len(word) :].lstrip(" \t")
    if not encoded:
        return run_id, _text(unquote(text)) or None
    try:
        reason = json.loads(text)
    except (ValueError, RecursionError):
        reason = None
    if not isinstance(reason, str):
        raise SandboxConfigError(
            f"{JSON_OPTION}: the reason after the run id must be one JSON string, e.g. "
            '"not on a Friday"',
            parameter="reason",
        )
    return run_id, _text(reason) or None


def _text(reason: str) -> str:
    """``reason`` if UTF-8 can carry it, else `SandboxConfigError`. ``"\\ud800"`` decodes to
    a lone surrogate, which no record, store row or message to the frontend can hold: let
    through, it failed later, mid-run, as a raw ``UnicodeEncodeError``."""
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SandboxConfigError(
            f"reason: holds a lone surrogate ({reason[exc.start]!r} at character {exc.start}), "
            "which is no text: give the reason as text",
            parameter="reason",
        ) from None
    return reason
