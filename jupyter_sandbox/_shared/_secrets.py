"""Keeping secret values out of everything a run shows or keeps.

A secret reaches the container's code (that is the point of passing it), so the code can print
it, raise it or return it. Whatever comes back is masked before anyone sees it: streams (live and
in the transcript), error messages, and the previews of inputs and outputs in records and views.
A value that holds a secret is shown as `HIDDEN`, whole, rather than masked in its bounded
preview: a preview cut mid-secret would show a prefix that masking can no longer recognise.

Masking recognises the secret's own text. It guards against honest code that prints what it
should not; code that means to leak a secret can always encode it first (base64, reversed...).
Error messages are cut to a bound (Python's ``int()`` quotes 200 characters, ours 40-120)
before we see them, so a secret straddling the cut shows only a piece of itself, which no
longer matches: `mask_error` also masks a secret's start (or end) where text is cut.
"""

from __future__ import annotations

import codecs
import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
HIDDEN = "*** (holds a secret value)"
"""The preview of a value that holds a secret."""
CUT_SHOWN = 1
"""Characters of a secret an error message cut mid-secret may still show: a longer start
(or end) of it next to a cut is masked. One character is no secret, and masking single
characters next to every quote would garble messages."""
_CUT_AFTER = re.compile(r"['\"…]|\.\.\.|\Z")
"""Where bounded text stops a value it quotes: a closing quote, an ellipsis, its end."""
_CUT_BEFORE = re.compile(r"\A|['\"…]|\.\.\.")
"""Where bounded text starts a value it quotes (a tail): an opening quote, an ellipsis."""


def forms(secrets: Iterable[str]) -> tuple[str, ...]:
    """Each secret, plus the escaped spellings honest code prints it in without meaning to.

    A secret holding a backslash, a quote, a newline or a control character reaches a
    traceback as Python's ``repr`` writes it (``int(token)`` fails with
    ``invalid literal for int(): 'pa\\ss'``), and reaches our own errors the same way (an
    output that does not parse is quoted): masking only the raw text left those showing in
    full. So the ``repr`` of the text and of its UTF-8 bytes (in both quote styles) and its
    JSON escaping are masked too. A plain secret has no other form. Worked out once per set
    of secrets (a durable run asks for each record it stores).
    """
    return _forms(tuple(secrets))


@functools.lru_cache(maxsize=64)
def _forms(secrets: tuple[str, ...]) -> tuple[str, ...]:
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
    """Mask the message of an exception we are about to show (its ``args`` make its text),
    with `mask_cut`: error text quotes values cut to a bound."""
    if secrets:
        err.args = tuple(mask_cut(a, secrets) if isinstance(a, str) else a for a in err.args)


def mask_cut(text: str, secrets: Iterable[str]) -> str:
    """`mask`, and also each piece of a secret (in any of its `forms`) longer than
    `CUT_SHOWN` that ends where the text cuts a value (`_CUT_AFTER`: ``'SECRETVAL`` at the
    end of ``int()``'s message) or starts where it begins one (`_CUT_BEFORE`). Only for
    bounded text such as error messages: a stream legitimately ends in the middle of a word.
    The pieces of every form are found in the same text, then masked at once: masking one
    form's piece first could leave another form's longer piece unrecognisable."""
    return CutMasker(secrets)(text)


class CutMasker:
    """`mask_cut` by the same secrets for many texts (a record's, a live view's): their
    `forms`, and the edges a text must hold to need more than a glance, worked out once."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.spellings = forms(secrets)
        # The secret, and each piece `_pieces` finds, holds its first or last CUT_SHOWN + 1
        # characters: most texts hold neither, and are returned as they are at once.
        self._edges = [(s[: CUT_SHOWN + 1], s[-CUT_SHOWN - 1 :]) for s in self.spellings]

    def __call__(self, text: str) -> str:
        if not any(start in text or end in text for start, end in self._edges):
            return text
        text = _mask(text, self.spellings)
        spans = sorted(
            span
            for secret, (start, end) in zip(self.spellings, self._edges, strict=True)
            if start in text or end in text
            for span in _pieces(text, secret)
        )
        merged: list[list[int]] = []
        for start, end in spans:  # overlapping pieces become one mask
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in reversed(merged):  # from the end: earlier spans keep their place
            text = text[:start] + MASK + text[end:]
        return text


def _pieces(text: str, secret: str) -> list[tuple[int, int]]:
    """Spans of ``text`` holding the longest start of ``secret`` before each `_CUT_AFTER`
    and the longest end of it after each `_CUT_BEFORE` (more than `CUT_SHOWN` characters,
    less than the whole). Only positions holding the secret's first (or last) character are
    tried."""
    spans: list[tuple[int, int]] = []
    if len(secret) <= CUT_SHOWN + 1:
        return spans
    for cut in _CUT_AFTER.finditer(text):
        end = cut.start()
        if end <= CUT_SHOWN:  # `find` would read a negative bound from the end
            continue
        pos = text.find(secret[0], max(end - len(secret) + 1, 0), end - CUT_SHOWN)
        while pos != -1 and not secret.startswith(text[pos:end]):
            pos = text.find(secret[0], pos + 1, end - CUT_SHOWN)
        if pos != -1:
            spans.append((pos, end))
    for cut in _CUT_BEFORE.finditer(text):
        start = cut.end()
        stop = min(start + len(secret) - 1, len(text))
        pos = text.rfind(secret[-1], start + CUT_SHOWN, stop)
        while pos != -1 and not secret.endswith(text[start : pos + 1]):
            pos = text.rfind(secret[-1], start + CUT_SHOWN, pos)
        if pos != -1:
            spans.append((start, pos + 1))
    return spans


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
            except KeyboardInterrupt:  # may be Ctrl-C: it stays the person's
                raise
            except BaseException:  # a value whose str/repr raises (even SystemExit) shows nothing
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

    def add(self, secrets: Iterable[str]) -> None:
        """Mask ``secrets`` too from now on (an orchestration learns its secrets as its
        sandbox tools return them)."""
        self.secrets = tuple(dict.fromkeys((*self.secrets, *forms(secrets))))

    def feed(self, data: bytes) -> str:
        """The text of ``data`` that can be shown now, masked."""
        return self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> str:
        """`feed` for a stream that arrives as text."""
        text = _mask(self._pending + text, self.secrets)
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
