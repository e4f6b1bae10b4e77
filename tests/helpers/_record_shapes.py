"""A value checked against the record TypedDicts of `jupyter_sandbox.records`: every key
declared, none undeclared, each value of its declared type, and JSON-safe as it is."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

from jupyter_sandbox import records


def check(value: Any, hint: Any, path: str = "record") -> None:
    """``value`` fits ``hint``: a TypedDict has its required keys and no undeclared one, nested
    records included; scalars have their declared type (an int is a float, as in typing)."""
    origin = get_origin(hint)
    if is_typeddict(hint):
        assert isinstance(value, dict), path
        missing = hint.__required_keys__ - set(value)
        extra = set(value) - hint.__required_keys__ - hint.__optional_keys__
        assert not missing, f"{path} ({hint.__name__}) lacks {sorted(missing)}"
        assert not extra, f"{path} ({hint.__name__}) has undeclared {sorted(extra)}"
        hints = get_type_hints(hint)
        for key, item in value.items():
            check(item, hints[key], f"{path}.{key}")
    elif origin in (typing.Union, types.UnionType):
        options = get_args(hint)
        if value is None:
            assert type(None) in options, f"{path} is None"
            return
        kinds = [o for o in options if is_typeddict(o) and "kind" in get_type_hints(o)]
        if kinds:  # a Record: the one its kind names
            (match,) = [
                o for o in kinds if value.get("kind") in get_args(get_type_hints(o)["kind"])
            ]
            check(value, match, path)
            return
        (only,) = [o for o in options if o is not type(None)]
        check(value, only, path)
    elif origin is typing.Literal:
        assert value in get_args(hint), f"{path}: {value!r} not in {get_args(hint)}"
    elif origin is list:
        assert isinstance(value, list), path
        for i, item in enumerate(value):
            check(item, get_args(hint)[0], f"{path}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), path
        for key, item in value.items():
            assert isinstance(key, str), path
            check(item, get_args(hint)[1], f"{path}[{key!r}]")
    elif hint is float:
        assert isinstance(value, int | float) and not isinstance(value, bool), path
    elif hint is int:
        assert isinstance(value, int) and not isinstance(value, bool), path
    else:
        assert isinstance(value, hint), f"{path}: {value!r} is not {hint.__name__}"


def check_record(record: Any) -> None:
    check(record, records.Record)
    assert json.loads(json.dumps(record)) == record  # JSON-safe as it is
