"""Keeping secret values out of everything a run shows or keeps.

A secret reaches the container's code (that is the point of passing it), so the code can print
it, raise it or return it. Whatever comes back is masked before anyone sees it: streams (live and
in the transcript), error messages, and the previews of inputs and outputs in records and views.
A value that holds a secret is shown as `HIDDEN`, whole, rather than masked in its bounded
preview: a preview cut mid-secret would show a prefix that masking can no longer recognise.

Masking recognises the secret's own text. It guards against honest code that prints what it
should not; code that means to leak a secret can always encode it first (base64, reversed...).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
HIDDEN = "*** (holds a secret value)"
"""The preview of a value that holds a secret."""


def forms(secrets: Iterable[str]) -> tuple[str, ...]:
    """Each secret, plus the escaped spellings honest code prints it in without meaning to.

    A secret holding a backslash, a quote, a newline or a control character reaches a
    traceback as Python's ``repr`` writes it (``int(token)`` fails with
    ``invalid literal for int(): 'pa\\ss'``), and reaches our own errors the same way (an
    output that does not parse is quoted): masking only the raw text left those showing in
    full. So the ``repr`` of the text and of its UTF-8 bytes (in both quote styles) and its
    JSON escaping are masked too. A plain secret has no other form.
    """
    found: dict[str, None] = {}
    for secret in secrets:
        if not secret:
            continue
        found[secret] = None
        for quoted in (repr(secret + "'\""), repr((secret + "'\"").encode())):
            single = quoted[quoted.index("'") + 1 : -4]  # the ' style, with ' escaped
            found[single] = None
            found[single.replace("\\'", "'")] = None  # the " style Python picks for it's
        found[json.dumps(secret)[1:-1]] = None
        found[json.dumps(secret, ensure_ascii=False)[1:-1]] = None
    return tuple(found)


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret (in each of its `forms`) replaced, longest
    first, so a secret that contains another is masked whole."""
    return _mask(text, forms(secrets))


def _mask(text: str, spellings: Iterable[str]) -> str:
    for secret in sorted(spellings, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def mask_error(err: BaseException, secrets: tuple[str, ...]) -> None:
    """Mask the message of an exception we are about to show (its ``args`` make its text)."""
    if secrets:
        err.args = tuple(mask(a, secrets) if isinstance(a, str) else a for a in err.args)


def holds_secret(value: Any, secrets: tuple[str, ...]) -> bool:
    """True when ``value``, or anything inside a list/tuple/dict of it, shows a secret.

    Walks iteratively (a value may be deeply nested, or cyclic) and checks texts and bytes
    (as UTF-8) as they are, any other leaf by its ``str`` and ``repr``: a secret ``"12345"``
    is held by the int 12345 too.
    """
    if not secrets:
        return False
    secrets = forms(secrets)
    encoded = [s.encode() for s in secrets]
    todo, seen = [value], set()
    while todo:
        item = todo.pop()
        if isinstance(item, Mapping | list | tuple | set | frozenset):
            if id(item) in seen:  # shared or cyclic: once is enough
                continue
            seen.add(id(item))
            todo.extend([*item.keys(), *item.values()] if isinstance(item, Mapping) else item)
        elif isinstance(item, str):  # searched as it is: no copy of a long text
            if any(s in item for s in secrets):
                return True
        elif isinstance(item, bytes | bytearray):
            if any(s in item for s in encoded):
                return True
        else:
            try:
                texts = (str(item), repr(item))
            except Exception:  # a value whose str/repr raises shows nothing
                continue
            if any(s in t for t in texts for s in secrets):
                return True
    return False


class Hidden:
    """Stands in for a value that holds a secret wherever values are previewed (live views)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return HIDDEN


def hide_values(values: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """``values`` with each one that holds a secret replaced by a `Hidden`."""
    return {k: Hidden() if holds_secret(v, secrets) else v for k, v in values.items()}


class StreamMasker:
    """Masks secrets in one output stream however its bytes are split into chunks.

    A secret can arrive one character per chunk (printed with flush), or cut by a frame
    boundary, even in the middle of a UTF-8 sequence. So bytes go through an incremental
    decoder, and the text is held back from its first position that could still begin a
    secret: at most ``len(secret) - 1`` characters wait for the next chunk or for `flush`.
    """

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.secrets = forms(secrets)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> str:
        """The text of ``data`` that can be shown now, masked."""
        text = _mask(self._pending + self._decoder.decode(data), self.secrets)
        keep = self._held(text)
        self._pending = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The rest, at the end of the stream (a secret's prefix alone is not the secret)."""
        text = _mask(self._pending + self._decoder.decode(b"", final=True), self.secrets)
        self._pending = ""
        return text

    def _held(self, text: str) -> int:
        """Length of the longest end of ``text`` that is the start of a secret.

        Only positions holding a secret's first character are tried (a ``find`` in the
        last ``len(secret) - 1`` characters), so a chunk costs about as much as its masking.
        """
        held = 0
        for secret in self.secrets:
            pos = text.find(secret[0], max(len(text) - len(secret) + 1, 0))
            while pos != -1:
                if secret.startswith(text[pos:]):  # the earliest fit is the longest
                    held = max(held, len(text) - pos)
                    break
                pos = text.find(secret[0], pos + 1)
        return held
