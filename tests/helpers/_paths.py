"""Where things are that tests reach by path: the helper scripts tests run as processes of
their own (MCP servers, the servers inside network namespaces), the checkout's root and the
folder screenshots are saved to."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
ROOT = HELPERS.parents[1]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
