"""Which un-awaited call a variable holds, so a type error can name the call, not the variable.

``text = fetch_page(2)`` then ``word_count(text)``: the checker reports the argument ``text``
on the later line (it is a ``CoroutineType``), but the mistake, and the fix, is the call two
lines up. This reads the cell's own syntax tree to find the last plain assignment to that name
before the line that uses it, following plain aliases (``u = text``), and returns the call's
text and line when the assignment's value is a call that was not awaited.

Only syntax is read, so this never runs anything and never fails: code Python cannot parse
(Monty accepts a few forms CPython does not) or a name bound some other way (a loop target, a
tuple, an augmented assignment) gives ``None`` and the caller keeps the checker's own span.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
"""A cell may ``await`` at top level, as Monty allows."""
_ALIASES_CEILING = 32
"""Alias hops followed before giving up (``a = b``, ``b = a`` must not loop)."""


@dataclass(frozen=True)
class Source:
    """The un-awaited call ``name`` holds: its callee, its text and where it is."""

    callee: str
    text: str
    line: int
    column: int
    end_column: int


def held_call(code: str, name: str, row: int) -> Source | None:
    """The un-awaited call whose result ``name`` holds when line ``row`` uses it, if the cell's
    syntax says so plainly."""
    try:
        tree = compile(code, "<cell>", "exec", flags=_FLAGS, dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    binds: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    binds.setdefault(target.id, []).append(node)
    for _ in range(_ALIASES_CEILING):
        before = [node for node in binds.get(name, ()) if node.lineno < row]
        if not before:
            return None
        value = max(before, key=lambda node: (node.lineno, node.col_offset)).value
        if isinstance(value, ast.Name):
            name, row = value.id, value.lineno
            continue
        if not isinstance(value, ast.Call) or value.lineno != value.end_lineno:
            return None
        text = ast.get_source_segment(code, value)
        if text is None or value.end_col_offset is None:
            return None
        # The tree counts columns in UTF-8 bytes; a caret counts characters.
        line = code.splitlines()[value.lineno - 1].encode()
        column = len(line[: value.col_offset].decode(errors="replace"))
        return Source(
            callee=ast.unparse(value.func),
            text=text,
            line=value.lineno,
            column=column,
            end_column=column + len(text),
        )
    return None
