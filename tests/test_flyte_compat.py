"""Code written for Flyte 2's ``flyte.sandbox`` calls ours with the same names and kinds.

Flyte's signatures are recorded here as data, from its documentation (the reference pages in
DESIGN.md's sources): Flyte need not be installed. Every difference is listed with its reason;
a new one fails until it is listed (and the README's table says why).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from inspect import Parameter
from typing import Any

import pytest

from jupyter_sandbox import LimitExceeded, SandboxConfigError, Tool, create, orchestrate_local

P, K = Parameter.POSITIONAL_OR_KEYWORD, Parameter.KEYWORD_ONLY
REQUIRED = Parameter.empty

FLYTE_CREATE: list[tuple[str, Any, Any]] = [
    ("name", P, REQUIRED),
    ("code", K, None),
    ("inputs", K, None),
    ("outputs", K, None),
    ("command", K, None),
    ("arguments", K, None),
    ("packages", K, None),
    ("system_packages", K, None),
    ("additional_commands", K, None),
    ("resources", K, None),
    ("image_config", K, None),
    ("image_name", K, None),
    ("image", K, None),
    ("auto_io", K, True),
    ("retries", K, 0),
    ("timeout", K, None),
    ("env_vars", K, None),
    ("secrets", K, None),
    ("cache", K, "auto"),
]
"""``flyte.sandbox.create``: ``name``, then keyword-only parameters."""

FLYTE_ORCHESTRATE_LOCAL: list[tuple[str, Any, Any]] = [
    ("source", P, REQUIRED),
    ("inputs", K, REQUIRED),
    ("tasks", K, None),
    ("timeout_ms", K, 30_000),
]
"""``flyte.sandbox.orchestrate_local(source, *, inputs, tasks=None, timeout_ms=30_000)``."""

CREATE_DIFFERENCES = {
    "image_config": "absent: registries and Python versions are Flyte's image builder's",
    "image_name": "absent: images are named by their content hash, never pushed",
    "cache": "default 'disable': a notebook re-runs a cell to run it again",
}
"""Flyte parameters we lack or default otherwise (the README's table gives the same reasons)."""
OUR_EXTRAS = {"base_image", "network", "cluster", "isolation"}
"""Keyword-only parameters of ours that Flyte lacks."""


def shape(function: Any) -> dict[str, tuple[Any, Any]]:
    return {name: (p.kind, p.default) for name, p in inspect.signature(function).parameters.items()}


@pytest.mark.parametrize(
    ("function", "flyte", "differences", "extras"),
    [
        (create, FLYTE_CREATE, CREATE_DIFFERENCES, OUR_EXTRAS),
        (orchestrate_local, FLYTE_ORCHESTRATE_LOCAL, {}, set()),
    ],
    ids=["create", "orchestrate_local"],
)
def test_flyte_names_kinds_and_defaults_hold(
    function: Any,
    flyte: list[tuple[str, Any, Any]],
    differences: dict[str, str],
    extras: set[str],
) -> None:
    ours = shape(function)
    differ = set()
    for name, kind, default in flyte:
        if name not in ours:
            differ.add(name)
            continue
        assert ours[name][0] == kind, name  # a kind that differs breaks callers: never listed
        if ours[name][1] != default:
            differ.add(name)
    assert differ == set(differences)
    flyte_names = [name for name, _, _ in flyte if name in ours]
    assert [n for n in ours if n in flyte_names] == flyte_names  # same order
    assert set(ours) - {name for name, _, _ in flyte} == extras
    assert all(ours[name][0] == K for name in extras)


def add(x: int, y: int) -> int:
    return x + y


def test_flytes_orchestrate_local_example_runs() -> None:
    """The example on Flyte's "Workflow sandboxing" page, as written there."""
    result = asyncio.run(
        orchestrate_local("add(x, y) * 2", inputs={"x": 1, "y": 2}, tasks=[Tool(add, name="add")])
    )
    assert result == 6


def test_timeout_ms_is_milliseconds_and_a_bad_one_is_named() -> None:
    slow = "n = 0\nwhile True:\n    n += 1"
    with pytest.raises(LimitExceeded, match=r"time limit exceeded.* 0\.2 s"):
        asyncio.run(orchestrate_local(slow, inputs={}, timeout_ms=200))
    with pytest.raises(SandboxConfigError, match=r"^timeout_ms must be .* got -5$"):
        asyncio.run(orchestrate_local("1", inputs={}, timeout_ms=-5))


def test_create_takes_only_the_name_positionally() -> None:
    with pytest.raises(TypeError):
        create("s", "print(1)")  # type: ignore[call-arg]


def test_a_sandbox_definition_is_frozen() -> None:
    sandbox = create("s", code="y = x", inputs={"x": int}, outputs={"y": int})
    assert dataclasses.is_dataclass(sandbox)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sandbox.timeout = 1  # type: ignore[misc]
