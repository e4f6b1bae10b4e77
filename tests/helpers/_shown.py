"""A view's display calls caught instead of shown, for view tests outside a kernel."""

from __future__ import annotations


class Shown:
    """Stands in for the cell: what the view displayed and updated, by display id."""

    def __init__(self, view) -> None:
        self.sent: list[tuple[str, dict]] = []
        view._route.show = lambda data, display_id=None: self.sent.append(("show", data))
        view._route.replace = lambda data, display_id: self.sent.append(("update", data))

    def last(self, mime: str) -> dict:
        return self.sent[-1][1][mime]
