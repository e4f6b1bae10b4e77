"""An MCP server that starts a child of its own, as a server that runs a helper does.

python tests/helpers/_mcp_family.py FILE         writes its pid and its child's to FILE, then serves
                                         `_mcp_servers.py`'s demo over stdio
python tests/helpers/_mcp_family.py FILE mute    the same, but never speaks MCP

Only the standard library before the pids are written: they are there within moments of the
start, long before the MCP SDK would have been imported. The child inherits the server's
pipes and names this file in its command line (the tests look for it).
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", __file__])
    Path(sys.argv[1]).write_text(f"{os.getpid()} {child.pid}")
    if sys.argv[2:] == ["mute"]:
        time.sleep(600)
    else:
        servers = str(Path(__file__).with_name("_mcp_servers.py"))
        sys.argv = [servers, "demo"]
        runpy.run_path(servers, run_name="__main__")
