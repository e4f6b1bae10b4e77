"""Samples, not data: what the model may see of each sample, and the sample as a sandbox input.

The model gets a DataFrame's columns, dtypes and row count and at most ``max_sample_rows``
rows; a `File` its size and at most that many lines of its text. Nothing computed over the
whole data (no min, max or mean) goes into the summary: each such figure is a value from
outside the sample. Secret values the agent passes to its sandboxes are masked in it. pandas
is never imported here: a DataFrame is recognised by what it has (``to_csv``, ``columns``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._shared._secrets import mask
from ..sandbox import File

LINE_CHARS = 400
"""Characters of one sample line the model sees (a file of one enormous line is no sample)."""


def is_dataframe(value: object) -> bool:
    return hasattr(value, "to_csv") and hasattr(value, "columns") and hasattr(value, "head")


def check_sample(name: str, value: object) -> None:
    if not (is_dataframe(value) or isinstance(value, File)):
        raise TypeError(
            f"sample {name!r} is a {type(value).__name__}: samples take pandas DataFrames and "
            "File objects (pass other values as inputs= types and run(...) values)"
        )


def summarise(
    samples: Mapping[str, Any], max_rows: int, secrets: Iterable[str] = ()
) -> tuple[str, dict[str, str]]:
    """The data context the model reads, and each sample's content digest (for the cache)."""
    parts, digests = [], {}
    for name, value in samples.items():
        if is_dataframe(value):
            head = value.head(max_rows)
            dtypes = ", ".join(f"{c}: {t}" for c, t in value.dtypes.astype(str).items())
            text = head.to_csv(index=False)
            parts.append(
                f"## {name} (a CSV file at the path in variable `{name}`)\n"
                f"{len(value)} rows; columns: {dtypes}\n"
                f"first {len(head)} rows as CSV:\n{text}"
            )
            digests[name] = hashlib.sha256(value.to_csv(index=False).encode()).hexdigest()
        else:
            data = Path(value).read_bytes()
            lines = data.decode(errors="replace").splitlines()[:max_rows]
            shown = "\n".join(line[:LINE_CHARS] for line in lines)
            parts.append(
                f"## {name} (a file at the path in variable `{name}`)\n"
                f"{len(data)} bytes; first {len(lines)} lines:\n{shown}\n"
            )
            digests[name] = hashlib.sha256(data).hexdigest()
    return mask("\n".join(parts), [s for s in secrets if s]), digests


_written: dict[str, File] = {}
"""DataFrames written as CSV this process, by content digest: a run reuses the file."""


def as_input(name: str, value: Any) -> Any:
    """``value`` as the sandbox takes it: a DataFrame as a `File` of its CSV, the rest as is."""
    if not is_dataframe(value):
        return value
    text = value.to_csv(index=False)
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest not in _written or not _written[digest].path.exists():
        folder = Path(tempfile.gettempdir()) / f"jupyter-sandbox-codegen-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / f"{name}-{digest[:16]}.csv"
        path.write_text(text)
        _written[digest] = File(path)
    return _written[digest]
