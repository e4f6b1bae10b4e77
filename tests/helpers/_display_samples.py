"""Hand-written records in the engines' shapes, and hostile displays, for renderer and browser
tests."""

from __future__ import annotations

from typing import Any


def call(call_id: int, tool: str, start: float, end: float | None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "call_id": call_id,
        "tool": tool,
        "args": ["1", "2"],
        "kwargs": {},
        "result": "3",
        "error": None,
        "host_traceback": None,
        "start": start,
        "end": end,
        "line": call_id,
        "column": 0,
        "replayed": False,
        "children": [],
    }
    record.update(extra)
    return record


def trace_record(n_calls: int = 3) -> dict[str, Any]:
    """Calls 1 and 2 overlap; the last call fails with a host traceback."""
    calls = [call(i + 1, "add", 0.1 * i, 0.1 * i + 0.15) for i in range(n_calls - 1)]
    calls.append(
        call(
            n_calls,
            "fetch",
            0.3,
            0.35,
            args=["'<script>'"],
            result=None,
            error="ValueError: no such page",
            host_traceback=(
                'Traceback (most recent call last):\n  File "tools.py"\nValueError: no such page'
            ),
        )
    )
    return {
        "version": 1,
        "kind": "orchestrate",
        "code": "add(1, 2)",
        "status": "ok",
        "value": "3",
        "stdout": "hello\n",
        "error": None,
        "sandbox_traceback": None,
        "duration": 0.4,
        "calls": calls,
    }


def run_record(build_error: str | None = None) -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "sandbox",
        "name": "train",
        "image": "jupyter-sandbox:abc123",
        "status": "error" if build_error else "ok",
        "error": build_error,
        "duration": 3.5,
        "exit_code": None if build_error else 0,
        "attempts": 0 if build_error else 1,
        "cached": False,
        "build": {
            "tag": "jupyter-sandbox:abc123",
            "cached": False,
            "seconds": 12.5,
            "steps": ["starting from base", "installing numpy (uv)"],
            "total_steps": 2,
            "log": "Step 1/2 : FROM base\nStep 2/2 : RUN uv pip install numpy\nCollecting numpy\n"
            + ("No matching distribution found for numpy" if build_error else "Installed numpy"),
            "error": build_error,
        },
        "stdout": "training\n",
        "stderr": "",
        "outputs": {"score": {"type": "float", "preview": "0.93"}},
        "inputs": {"data": {"type": "list", "preview": "[1, 2, 3]"}},
    }


def request_row(
    n: int, host: str, port: int, path: str, status: int, why: str | None = None
) -> dict[str, Any]:
    return {
        "time": 1_790_000_000.0 + n * 0.25,
        "method": "CONNECT" if not path else "GET",
        "host": host,
        "port": port,
        "path": path,
        "status": status,
        "sent": 120 + n,
        "received": 4096 * (status == 200),
        "allowed": why is None,
        "why": why,
    }


def requests_record() -> dict[str, Any]:
    """An allow-listed run that sent 3 requests, one of them refused."""
    record = run_record()
    record["build"] = None
    record["requests"] = {
        "total": 3,
        "allowed": 2,
        "refused": 1,
        "refusals": {"evil.example:443": "not on the list"},
        "rows": [
            request_row(0, "pypi.org", 443, "", 200),
            request_row(1, "api.example.com", 80, "/v1/items?***", 200),
            request_row(2, "evil.example", 443, "", 403, "not on the list"),
        ],
    }
    return record


def interrupted_record() -> dict[str, Any]:
    """A run Ctrl-C stopped while its second call ran on the host: that call abandoned."""
    record = trace_record(2)
    record["calls"][1].update(
        error="Abandoned: the run was interrupted while this call ran on the host",
        cancelled=True,
        result=None,
    )
    record.update(status="interrupted", error="Interrupted: interrupted", raised=True)
    return record


def paused_record() -> dict[str, Any]:
    """A durable run paused at a gated call (``delete`` with approval), made in a session: one
    call done, the gated one waiting (listed in ``calls`` unfinished and in ``pending``)."""
    waiting = call(2, "delete", 0.2, None, args=["['a.txt', 'b.txt']"], result=None, line=3)
    record = trace_record(2)
    record.update(
        status="paused",
        value=None,
        duration=0.25,
        calls=[record["calls"][0], waiting],
        run_id="3f2a9c1d0b7e",
        # as the kernel seals it, naming its arguments from the tool's signature
        pending=[{**waiting, "digest": "5e1f0c2a9b8d7e6f", "params": ["paths"]}],
        session="cleanup",
    )
    return record


def forked_record() -> dict[str, Any]:
    """A fork of run ``3f2a9c1d0b7e`` at call 2, finished ok."""
    record = trace_record(2)
    record["calls"][1].update(error=None, host_traceback=None, result="[]")
    record.update(run_id="b71c0e55a9d2", forked_from={"run_id": "3f2a9c1d0b7e", "call": 2})
    return record


def bare(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as the engine made it: without what a cell's display adds to it (its words,
    ``summary``, and where the cell's output fell among the calls, ``printed...``)."""
    calls = [
        {k: v for k, v in c.items() if not k.startswith("printed")} for c in record.get("calls", [])
    ]
    kept = {k: v for k, v in record.items() if k not in ("summary", "printed")}
    return {**kept, "calls": calls} if "calls" in record else kept


# -- hostile displays: what a sandbox's code may display to get out or to pass for the notebook

LOADERS = {
    "img": '<img src="{u}">',
    "markdown-image": "![x]({u})",
    "css-url": '<div style="background-image:url({u});width:20px;height:20px">c</div>',
    "video-poster": '<video poster="{u}" width="20"></video>',
    "audio": '<audio src="{u}" controls></audio>',
    "input-image": '<input type="image" src="{u}">',
    "srcset": '<img srcset="{u} 1x" alt="s">',
    "picture": '<picture><source srcset="{u}"><img alt="p"></picture>',
    "video-source": '<video width="20"><source src="{u}"></video>',
    "link": '<link rel="stylesheet" href="{u}">',
    "object": '<object data="{u}"></object>',
    "embed": '<embed src="{u}">',
    "background": '<table background="{u}"><tr><td>t</td></tr></table>',
    "svg-image": '<svg width="20" height="20"><image href="{u}" width="20" height="20"/></svg>',
    "svg-xlink": '<svg width="20" height="20"><image xlink:href="{u}" width="20"/></svg>',
    "import": "<style>@import url({u});</style>",
    "style-block": "<style>.jsb-display{{background:url({u})}}</style>",
    "refresh": '<meta http-equiv="refresh" content="1;url={u}">',
    "iframe": '<iframe src="{u}"></iframe>',
}
"""One display of each kind that makes a browser fetch an address (``{u}``) when it is drawn."""


def loading_markup(url: str) -> str:
    """Every one of `LOADERS` in one piece of markup (HTML, or Markdown with raw HTML), each
    fetching ``url/<its name>``."""
    return "\n\n".join(m.format(u=f"{url}/{name}") for name, m in LOADERS.items())


SCRIPT_LINKS = [
    "[x](jav&#x61;script:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](javascript&colon;alert(1))",
    "[x](javascript\\:alert(1))",
    "[x][r]\n\n[r]: javascript:alert(1)",
    "[x][r]\n\n[r]: jav&#x61;script:alert(1)",
    "<javascript:alert(1)>",
    "[x](<javascript:alert(1)>)",
    "[x]( JaVaScRiPt:alert(1) 'title')",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    '<a href="jav&#x61;script:alert(1)">x</a>',
    '<a href="java\tscript:alert(1)">x</a>',
]
"""Markdown links that run code on a click once CommonMark (or HTML) has decoded them."""

RUNS_CODE = ("javascript:", "vbscript:", "data:")


def attribute_values(markup: str) -> list[str]:
    """Every attribute value of ``markup``, decoded and spelled as a browser reads a URL
    (ASCII tab and newline removed, surrounding spaces and controls stripped, lower case)."""
    from html.parser import HTMLParser

    found: list[str] = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            for _, value in attrs:
                spelled = (value or "").translate({9: None, 10: None, 13: None})
                found.append(spelled.strip(" " + "".join(map(chr, range(32)))).lower())

    Parser().feed(markup)
    return found


HOVER_BOX = (
    '<div class="jp-HoverBox jsb-approval" style="position:fixed;top:0;left:0;right:0;'
    'bottom:0;z-index:100000;background:#b00020;color:#fff;font-size:20px">'
    "<b>Approve this run?</b> <button>Approve</button></div>"
)
"""A fake approval panel over the whole notebook: JupyterLab's own ``.jp-HoverBox`` rule
(``position: fixed``) and a large ``z-index``."""
