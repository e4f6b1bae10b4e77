"""Python annotations for JSON schemas: what an MCP tool's stub declares, so Monty's type
check covers its arguments and its result as it covers a ``@tool``'s.

Only the shapes a type checker can hold are mapped (``integer``, ``number``, ``string``,
``boolean``, ``null``, ``array`` of items, ``object`` as a ``dict``, ``enum``/``const`` as a
``Literal``, ``anyOf``/``oneOf``/type lists as a union, ``$ref`` into the schema's own
``$defs``); anything else is ``Any``, which the checker lets through and the server still
validates. A schema is untrusted input (a server wrote it): nesting and ``$ref`` chains are
followed a bounded depth, the parts visited for one tool are counted against a `Budget` (a
few hundred bytes of ``anyOf`` s of ``$ref`` s to each other branch at every level, which a
depth bound alone leaves exponential), and a malformed part is ``Any``, never an exception.
"""

from __future__ import annotations

import inspect
import keyword
import typing
from collections.abc import Mapping
from typing import Any

_DEPTH = 16
"""How deep nested schemas and ``$ref`` chains are followed before a part is ``Any``."""
_VISITS = 5_000
"""Schema parts one tool's schemas may make us visit; past it every part left is ``Any``."""
_LITERALS = 64
"""An ``enum`` longer than this is its values' type, not a ``Literal`` of each."""
_SIMPLE: dict[str, Any] = {
    "integer": int,
    "number": float,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


class _Unset:
    def __repr__(self) -> str:
        return "<not sent>"


UNSET: Any = _Unset()
"""The default of an optional argument: an argument left at it is not sent (the server's own
default applies)."""


class Budget:
    """How many more schema parts may be visited: one per tool, shared by its input and
    output schemas, so the work a server's listing makes us do is linear in the tools."""

    def __init__(self, visits: int = _VISITS) -> None:
        self.left = visits
        self.spent = False
        """Whether a part was made ``Any`` because the budget ran out."""

    def spend(self) -> bool:
        """Whether one more part may be visited (counting it)."""
        if self.left <= 0:
            self.spent = True
            return False
        self.left -= 1
        return True


def annotation(
    schema: object, root: Mapping[str, Any] | None = None, budget: Budget | None = None
) -> Any:
    """The annotation for ``schema``; ``root`` is the document its ``$ref`` s point into;
    ``budget`` bounds the parts visited (a fresh one when None)."""
    budget = Budget() if budget is None else budget
    if root is None:
        root = schema if isinstance(schema, Mapping) else {}
    return _annotation(schema, root, budget, 0)


def _annotation(schema: object, root: Mapping[str, Any], budget: Budget, depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > _DEPTH or not budget.spend():
        return Any

    def inner(part: object) -> Any:
        return _annotation(part, root, budget, depth + 1)

    ref = schema.get("$ref")
    if isinstance(ref, str):
        return inner(_resolve(ref, root))
    if "const" in schema:
        return _literal([schema["const"]])
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return _literal(enum)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _union([inner(o) for o in options])
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return _union([inner({**schema, "type": k}) for k in kind])
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        items = schema.get("items")
        return list.__class_getitem__(inner(items) if isinstance(items, Mapping) else Any)
    if kind == "object":
        extra = schema.get("additionalProperties")
        value = inner(extra) if isinstance(extra, Mapping) else Any
        return dict.__class_getitem__((str, value))
    return Any


def signature(schema: object, budget: Budget | None = None) -> inspect.Signature | None:
    """The parameters an input schema declares, required ones first (by position or name),
    then the optional ones (by name, defaulting to `UNSET`); None when the schema is no
    object of named properties a Python call can spell (a name that is no identifier)."""
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    names = list(properties)
    if not all(isinstance(n, str) and n.isidentifier() and not keyword.iskeyword(n) for n in names):
        return None
    budget = Budget() if budget is None else budget
    by_place = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [
        inspect.Parameter(name, by_place, annotation=annotation(properties[name], schema, budget))
        for name in names
        if name in required
    ]
    by_name = inspect.Parameter.KEYWORD_ONLY
    params += [
        inspect.Parameter(
            name, by_name, default=UNSET, annotation=annotation(properties[name], schema, budget)
        )
        for name in names
        if name not in required
    ]
    return inspect.Signature(params)


def wrapped_result(schema: object) -> bool:
    """Whether an output schema is the MCP SDK's wrapper for a value that is no object
    (``{"result": ...}``, titled ``<function>Output``): the tool's value is then that one
    field."""
    return (
        isinstance(schema, Mapping)
        and str(schema.get("title", "")).endswith("Output")
        and isinstance(schema.get("properties"), Mapping)
        and list(schema["properties"]) == ["result"]
        and schema.get("required") == ["result"]
    )


def _resolve(ref: str, root: Mapping[str, Any]) -> object:
    """A local ``#/...`` reference in ``root``, or None (``Any``) for anything else."""
    if not ref.startswith("#/"):
        return None
    node: object = root
    for part in ref[2:].split("/"):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part.replace("~1", "/").replace("~0", "~"))
    return node


def _literal(values: list[Any]) -> Any:
    plain = [v for v in values if type(v) in (str, int, bool) or v is None]
    if len(plain) != len(values) or len(values) > _LITERALS:
        return _union([_SIMPLE.get(_json_type(v), Any) for v in values])
    return typing.Literal.__getitem__(tuple(values))


def _json_type(value: object) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        type(None): "null",
    }.get(type(value), "")


def _union(options: list[Any]) -> Any:
    if Any in options:
        return Any
    unique = list(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else typing.Union.__getitem__(tuple(unique))
