"""Python annotations for JSON schemas: what an MCP tool's stub declares, so Monty's type
check covers its arguments and its result as it covers a ``@tool``'s.

Only the shapes a type checker can hold are mapped (``integer``, ``number``, ``string``,
``boolean``, ``null``, ``array`` of items, ``object`` as a ``dict``, ``enum``/``const`` as a
``Literal``, ``anyOf``/``oneOf``/type lists as a union, ``$ref`` into the schema's own
``$defs``); anything else is ``Any``, which the checker lets through and the server still
validates. A schema is untrusted input (a server wrote it): nesting and ``$ref`` chains are
followed a bounded depth, and a malformed part is ``Any``, never an exception.
"""

from __future__ import annotations

import inspect
import keyword
import typing
from collections.abc import Mapping
from typing import Any

_DEPTH = 16
"""How deep nested schemas and ``$ref`` chains are followed before a part is ``Any``."""
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


def annotation(schema: object, root: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    """The annotation for ``schema``; ``root`` is the document its ``$ref`` s point into."""
    if not isinstance(schema, Mapping) or depth > _DEPTH:
        return Any
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return annotation(_resolve(ref, root), root, depth + 1)
    if "const" in schema:
        return _literal([schema["const"]])
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return _literal(enum)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _union([annotation(o, root, depth + 1) for o in options])
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return _union([annotation({**schema, "type": k}, root, depth + 1) for k in kind])
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        items = schema.get("items")
        item = annotation(items, root, depth + 1) if isinstance(items, Mapping) else Any
        return list.__class_getitem__(item)
    if kind == "object":
        extra = schema.get("additionalProperties")
        value = annotation(extra, root, depth + 1) if isinstance(extra, Mapping) else Any
        return dict.__class_getitem__((str, value))
    return Any


def signature(schema: object) -> inspect.Signature | None:
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
    by_place = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [
        inspect.Parameter(name, by_place, annotation=annotation(properties[name], schema))
        for name in names
        if name in required
    ]
    by_name = inspect.Parameter.KEYWORD_ONLY
    params += [
        inspect.Parameter(
            name, by_name, default=UNSET, annotation=annotation(properties[name], schema)
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
