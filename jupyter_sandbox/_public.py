"""Public classes name their public home, not the private module that defines them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def publish(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module`` on each class in ``names`` still defined privately.

    A traceback, ``repr`` or ``help()`` then reads ``jupyter_sandbox.errors.ToolError``, which
    is what users import and catch, not ``jupyter_sandbox._errors.ToolError`` (httpx does the
    same). A class a more specific public module already claimed keeps that home. Pickle still
    works: ``module`` exports each name.
    """
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) and _private(obj.__module__):
            obj.__module__ = module


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))
