"""Shared fixtures. Engines run for real here: real Monty workers, a real IPython shell."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_sandbox.orchestrate import registry


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A real IPython shell with the extension loaded; tools registered by a test are removed."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jupyter_sandbox")
    before = set(registry)
    yield ip
    for name in set(registry) - before:
        registry.unregister(name)
