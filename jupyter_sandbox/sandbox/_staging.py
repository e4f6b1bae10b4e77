"""A run's inputs, one way: typed, then encoded, staged and fingerprinted in one pass.

`bind` types the inputs when a run is asked for (the declared tag, or the value's own: the
run's record and events name them from then on); `stage` writes them and the program into the
run's scratch folder and returns the `Staged` that the cache (its ``fingerprint``) and the
backend (its folders) both read. Nothing reads the staged files again to key the cache: each
input's digest is taken as it is written (`_io.stage_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._shared._errors import SandboxConfigError
from ._io import check_input, stage_inputs, stage_program
from ._spec import Mode
from ._types import infer_tag


@dataclass(frozen=True)
class Staged:
    """A run's inputs and program as written for its containers: the backend mounts (or
    packs) ``inputs`` and ``program``, the result cache keys on ``fingerprint``."""

    tags: Mapping[str, str]
    """Input name -> the type tag it was written as."""
    inputs: Path
    """The folder mounted read-only at ``/var/inputs``."""
    program: Path
    """The folder mounted read-only at ``/opt/jupyter-sandbox``: the code and its runner."""
    fingerprint: tuple[bytes, ...] = ()
    """The inputs' staged names and content digests, in the order `_cache.cache_key` reads
    them; empty when the run asked for none (its cache is off)."""


def bind(
    name: str, declared: Mapping[str, str | None], values: Mapping[str, Any]
) -> dict[str, str]:
    """Each input's type tag: the declared one, or the value's (`SandboxConfigError` for a
    name not declared, a declared one missing, or a value no tag fits)."""
    unexpected = sorted(set(values) - set(declared))
    if unexpected:
        raise SandboxConfigError(
            f"unexpected input(s) {unexpected}; {name!r} declares {list(declared)}"
        )
    missing = [input_name for input_name in declared if input_name not in values]
    if missing:
        raise SandboxConfigError(f"missing input(s) {missing} for {name!r}")
    return {key: tag or infer_tag(values[key]) for key, tag in declared.items()}


def check(tags: Mapping[str, str], values: Mapping[str, Any]) -> None:
    """`SandboxConfigError` for a value `stage` would refuse, without writing anything."""
    for name, tag in tags.items():
        check_input(name, tag, values[name])


def stage(
    work: Path,
    tags: Mapping[str, str],
    values: Mapping[str, Any],
    *,
    mode: Mode,
    code: str | None,
    outputs: Mapping[str, str | None],
    ca_bundle: bytes | None,
    fingerprint: bool,
) -> Staged:
    """Write a run's inputs (each checked against its tag, then encoded or copied) and its
    program under ``work``; with ``fingerprint``, take the inputs' digests on the way."""
    inputs, program = work / "inputs", work / "program"
    digests = stage_inputs(inputs, tags, values, hashed=fingerprint)
    stage_program(program, mode=mode, code=code, inputs=tags, outputs=outputs, ca_bundle=ca_bundle)
    return Staged(tags=dict(tags), inputs=inputs, program=program, fingerprint=digests)
