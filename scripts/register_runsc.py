"""Register gVisor's runsc with the Docker engine: merge it into daemon.json, never clobbering.

    /usr/bin/python3 scripts/register_runsc.py [DAEMON_JSON [RUNSC]]

Adds ``"runtimes": {"runsc": {"path": RUNSC, "runtimeArgs": ["--network=none"]}}`` (gVisor's
own network stack failed here; Docker's network mode still applies) and keeps every other
setting. A "runsc" already registered is left as it is (said so when it lacks --network=none);
a file that is not JSON is left untouched and the script fails, saying so. The new file is
written beside the old one and renamed over it, with the old one's permissions. Prints
"changed" or "unchanged". Run by scripts/bootstrap.sh (then dockerd is reloaded); stdlib
only, so Debian's own python3 runs it before any venv exists.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DAEMON_JSON = "/etc/docker/daemon.json"
RUNSC = "/usr/bin/runsc"


def register(path: Path, runsc: str) -> bool:
    """Merge the runsc runtime into ``path``; True if the file changed."""
    text = path.read_text() if path.exists() else ""
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise SystemExit(f"{path} is not valid JSON ({exc}); fix it, then run again") from None
    if not isinstance(config, dict) or not isinstance(config.get("runtimes", {}), dict):
        raise SystemExit(f"{path}: expected a JSON object with an object 'runtimes'")
    runtimes = config.setdefault("runtimes", {})
    if "runsc" in runtimes:
        if "--network=none" not in (runtimes["runsc"].get("runtimeArgs") or []):
            print(
                f"{path}: runsc is registered without --network=none; left as is", file=sys.stderr
            )
        return False
    runtimes["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(path.name + ".jupyter-sandbox.tmp")
    fresh.write_text(json.dumps(config, indent=2) + "\n")
    if path.exists():
        os.chmod(fresh, path.stat().st_mode & 0o7777)
    os.replace(fresh, path)
    return True


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else DAEMON_JSON)
    runsc = sys.argv[2] if len(sys.argv) > 2 else RUNSC
    print("changed" if register(path, runsc) else "unchanged")


if __name__ == "__main__":
    main()
