"""Where the helper scripts are that tests run as processes of their own (MCP servers, the
servers inside network namespaces)."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
