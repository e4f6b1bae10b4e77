"""`RunOptions` holds exactly the parameters `orchestrate` and `orchestrate_async` share: both
build it from their ``locals()``, so the three must name the same parameters in the same order
and the two functions must agree on every default and annotation."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect

import pytest

from jupyter_sandbox import orchestrate, orchestrate_async, tool
from jupyter_sandbox.orchestration._options import RunOptions


def test_both_functions_take_exactly_the_fields_of_run_options() -> None:
    fields = [f.name for f in dataclasses.fields(RunOptions)]
    sync, async_ = inspect.signature(orchestrate), inspect.signature(orchestrate_async)
    assert list(sync.parameters) == fields
    assert list(async_.parameters) == fields
    for name in fields:
        one, other = sync.parameters[name], async_.parameters[name]
        assert (one.default, one.annotation, one.kind) == (
            other.default,
            other.annotation,
            other.kind,
        ), name


def test_options_are_frozen() -> None:
    values = dict.fromkeys(f.name for f in dataclasses.fields(RunOptions))
    options = RunOptions(**values)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.code = "1"  # type: ignore[misc]


def test_both_functions_run_with_their_options() -> None:
    @tool
    def double(x: int) -> int:
        return 2 * x

    assert orchestrate("double(2)", tools=[double], max_calls=1).value == 4
    result = asyncio.run(orchestrate_async("double(3)", tools=[double], max_calls=1))
    assert result.value == 6
