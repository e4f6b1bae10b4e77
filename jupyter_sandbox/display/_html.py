"""Records as static HTML: the fallback for nbconvert, papermill, GitHub and JupyterLab without
our extension, and of the live record a running cell shows (see `_live`).

Everything is escaped; styling is inline or in one small ``<style>`` block scoped by ``jsb-``
classes, because sanitizers in untrusted notebooks may drop either and the text must still read.
nbconvert's and JupyterLab's rendered-HTML rules (``:not(.jp-RenderedMarkdown)
.jp-RenderedHTMLCommon td``: right-aligned, striped, centred tables) outrank a scoped class, so
the table layout we set is ``!important``; colours are the theme's variables, with fallbacks.
"""

from __future__ import annotations

from html import escape
from typing import cast
from urllib.parse import quote

from jupyter_sandbox.records import (
    BuildRecord,
    CallRecord,
    Record,
    RequestLogRecord,
    RunRecord,
    ToolRow,
    TraceRecord,
    TraceSummary,
    TypedValue,
)

from . import _format as fmt

STYLE = """<style>
.jsb{font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-code-font-size,12px)}
.jsb table{border-collapse:collapse!important;table-layout:auto!important;margin:0!important;
font-size:inherit!important;color:inherit!important}
.jsb tr,.jsb tr:hover{background:transparent!important}
.jsb th,.jsb td{padding:1px 8px!important;text-align:left!important;vertical-align:top!important;
border:0!important;border-bottom:1px solid var(--jp-border-color2,#e0e0e0)!important}
.jsb .jsb-error{color:var(--jp-error-color1,#c62828)}
.jsb .jsb-timeline{width:200px;min-width:200px;position:relative}
.jsb .jsb-bar{height:10px;background:var(--jp-brand-color1,#1976d2);min-width:2px;margin-top:3px}
.jsb .jsb-bar.jsb-error{background:var(--jp-error-color1,#c62828)}
.jsb .jsb-bar.jsb-running{background:var(--jp-layout-color4,#9e9e9e)}
.jsb .jsb-bar.jsb-queued{background:var(--jp-layout-color3,#bdbdbd)}
.jsb .jsb-bar.jsb-abandoned{background:var(--jp-warn-color1,#f57c00)}
.jsb .jsb-interrupted{border-left:3px solid var(--jp-warn-color1,#f57c00);padding-left:4px}
.jsb .jsb-abandoned .jsb-state{font-style:italic}
.jsb .jsb-bar.jsb-waiting{background:var(--jp-warn-color1,#f57c00)}
.jsb .jsb-muted{color:var(--jp-content-font-color2,#616161)}
.jsb .jsb-mark td{font-style:italic}
.jsb pre{margin:2px 0;max-height:300px;overflow:auto}
.jsb .jsb-tools td+td,.jsb .jsb-tools th+th{text-align:right!important}
.jsb code,.jsb .jsb-calls td{white-space:pre-wrap}
</style>"""


def render(record: Record) -> str:
    """The whole record as one HTML fragment; dispatches on ``kind``."""
    if record.get("kind") == "orchestrate":
        body = _orchestrate(cast(TraceRecord, record))
    else:
        body = _sandbox(cast(RunRecord, record))
    return f'{STYLE}<div class="jsb">{body}</div>'


COLUMNS = ("#", "tool", "call", "result", "duration", "status", "timeline")


def calls_table(record: TraceRecord, summary: TraceSummary) -> str:
    """One row per call with a timeline column (bars placed on the run's time axis show
    overlap); what the cell printed between calls, where it printed it; a nested record
    (a sandbox used as a tool) in a row of its own, the table's width. No scroll box: a box
    inside the notebook's own scroll hid the rows below it; the record is bounded instead."""
    calls = record.get("calls", [])
    span = max(record.get("duration") or 0.0, 1e-9)
    rows = ["<tr>" + "".join(f"<th>{title}</th>" for title in COLUMNS) + "</tr>"]
    marks = summary["marks"]
    for call in calls[: fmt.ROWS_SHOWN]:
        mark = marks.get(str(call.get("call_id")))
        if mark:
            rows.append(_mark(mark))
        rows.append(_call_row(call, span, fmt.row_status(call, record)))
    more = len(calls) - fmt.ROWS_SHOWN
    tail = f"<p>&hellip; {more} more calls in the JSON record</p>" if more > 0 else ""
    return f'<table class="jsb-calls">{"".join(rows)}</table>{tail}'


def _mark(text: str) -> str:
    """A row with what the cell printed just before the call under it."""
    return (
        f'<tr class="jsb-mark"><td></td><td colspan="{len(COLUMNS) - 1}" class="jsb-muted">'
        f"{escape(text)}</td></tr>"
    )


def tools_table(rows: list[ToolRow]) -> str:
    """The per-tool summary: calls, errors, total and p50/p95 time of each tool."""
    head = "".join(f"<th>{title}</th>" for title in fmt.TOOL_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in fmt.tool_cells(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="jsb-tools"><tr>{head}</tr>{body}</table>'


def _call_row(call: CallRecord, span: float, status: str) -> str:
    queued = call.get("queued") or 0.0
    start = call.get("start", 0.0) + queued  # the bar is the tool's own time
    end = call.get("end")
    width = max((span if end is None else end) - start, 0.0)
    waited = "waiting for a slot, " if status == "queued" else ""
    waited = waited or (f"queued {fmt.seconds(queued)}, " if queued else "")
    label = f"{waited}starts at {fmt.seconds(start)}, " + (
        "still running" if end is None else f"takes {fmt.seconds(width)}"
    )
    if status == "waiting":  # the tool has not run: a mark where the run paused
        width, label = 0.0, f"waiting for approval since {fmt.seconds(start)}"
    bar = (
        f'<div class="jsb-bar jsb-{status}" role="img" title="{label}" aria-label="{label}" '
        f'style="margin-left:{100 * start / span:.2f}%;'
        f'width:{100 * width / span:.2f}%"></div>'
    )
    error = call.get("error")
    if error is not None:
        traceback = call.get("host_traceback") or error
        if len(traceback) > fmt.TRACEBACK_SHOWN:
            traceback = "\u2026" + traceback[-fmt.TRACEBACK_SHOWN :]
        shade = "jsb-error" if status == "error" else "jsb-stopped"  # abandoned: not a failure
        result = _details(f'<span class="{shade}">{escape(fmt.clip(error))}</span>', traceback)
    else:
        result = escape(fmt.clip(str(call.get("result")))) if end is not None else ""
    children = "".join(
        f'<tr class="jsb-child-row"><td></td><td colspan="{len(COLUMNS) - 1}">'
        + _details(
            f"{escape(child.get('kind', 'record'))} record of call {call.get('call_id')}",
            None,
            render(child)
            + "".join(_details(label, text) for label, text in fmt.stream_tails(child)),
        )
        + "</td></tr>"
        for child in call.get("children", [])
    )
    replayed = " (replayed)" if call.get("replayed") else ""
    return (
        f'<tr class="jsb-call jsb-{status}"><td>{call.get("call_id")}</td>'
        f"<td>{escape(str(call.get('tool')))}</td>"
        f"<td>{escape(fmt.call_signature(call))}</td><td>{result}</td>"
        f'<td>{fmt.seconds(fmt.call_duration(call))}</td><td class="jsb-state">{status}'
        f'{replayed}</td><td class="jsb-timeline">{bar}</td></tr>{children}'
    )


def _details(summary: str, text: str | None, html: str = "") -> str:
    """A collapsed block: tracebacks and logs are there when wanted, out of the way otherwise."""
    inner = html if text is None else f"<pre>{escape(fmt.plain(text))}</pre>"
    return f"<details><summary>{summary}</summary>{inner}</details>"


def _orchestrate(record: TraceRecord) -> str:
    """The trace's words (`fmt.trace_summary`), tables and error; no value (the cell's result
    shows it, once) and no stdout (the cell's stream outputs show it, once)."""
    summary = fmt.trace_summary(record)
    status = record.get("status")
    status_class = {"error": "jsb-error", "interrupted": "jsb-interrupted"}.get(str(status), "")
    parts = [f'<b class="{status_class}">{escape(summary["headline"])}</b>']
    parts += [f'<div class="jsb-muted">{escape(note)}</div>' for note in summary["notes"]]
    if status == "paused":
        parts.append(_paused(record))
    if summary["tools"]:
        parts.append(tools_table(fmt.tool_rows(record)))
    if summary["kept"]:
        parts.append(f'<div class="jsb-muted">{escape(summary["kept"])}</div>')
    if record.get("calls"):
        parts.append(calls_table(record, summary))
    error = record.get("error")
    if error and not record.get("raised"):  # raised: the error output has it
        parts.append(
            _details(
                f'<span class="jsb-error">{escape(error)}</span>',
                record.get("sandbox_traceback") or error,
            )
        )
    if record.get("advice"):
        parts.append(f'<div class="jsb-advice">{escape(str(record.get("advice")))}</div>')
    return "".join(parts)


PAUSED = "margin:4px 0;padding-left:8px;border-left:3px solid var(--jp-warn-color1,#f57c00)"
"""A paused run's box: marked at its left edge, as in JupyterLab (inline: a sanitizer may
drop ``<style>``)."""


def _paused(record: TraceRecord) -> str:
    """A paused run: the calls it waits on and the two magics that answer it. No buttons: a
    static page (an export, a notebook viewer) has no kernel a button could reach."""
    calls = "".join(_pending(call, record) for call in record.get("pending", []))
    magics = fmt.approval_magics(record)
    digest = fmt.sealed_digest(record)
    sealed = f"digest {escape(digest)}: {escape(fmt.SEALED_NOTE)}; " if digest else ""
    if record.get("answered"):  # no magic to offer; the headline says how it was answered
        how = ""
    elif magics is None:
        how = f'<div class="jsb-muted">{escape(fmt.INVALID_RUN_NOTE)}</div>'
    else:
        how = (
            "<div>To answer, run one of these in a cell (this kernel or a later one):</div>"
            f"<pre>{escape(magics[0])}\n{escape(magics[1])}</pre>"
            f'<div class="jsb-muted">{sealed}{escape(fmt.REJECT_NOTE)}</div>'
        )
    return (
        f'<div class="jsb-paused" style="{PAUSED}"><div>{escape(fmt.paused_heading(record))}'
        f'</div><div class="jsb-pending">{calls}</div><div class="jsb-how">{how}</div></div>'
    )


ARGUMENT = "margin:0;white-space:pre-wrap;overflow-wrap:anywhere;max-height:24em;overflow:auto"
"""An argument's box: every character wrapped into view, long ones scrolled (inline, as
`PAUSED`)."""


def _pending(call: CallRecord, record: TraceRecord) -> str:
    """A paused call: its number, tool, line and the tool's summary, then each argument
    whole up to `fmt.PENDING_SHOWN`, and what was cut, said in words."""
    head = f"#{escape(str(call.get('call_id')))} <b>{escape(str(call.get('tool', '?')))}</b>"
    for part in (fmt.line_of(call), fmt.tool_summary(call)):
        if part:
            head += f' <span class="jsb-muted">{escape(part)}</span>'
    arguments = fmt.pending_arguments(call)
    rows = "".join(
        f'<tr><td class="jsb-arg-name">{escape(a.label)}</td>'
        f'<td><pre class="jsb-arg-text" style="{ARGUMENT}">{escape(a.text)}</pre></td></tr>'
        for a in arguments
    )
    body = (
        f'<table class="jsb-args">{rows}</table>'
        if rows
        else ('<div class="jsb-muted">no arguments</div>')
    )
    note = fmt.cut_note(arguments, record.get("run_id"))
    cut = f'<div class="jsb-cut">{escape(note)}</div>' if note else ""
    return f'<div class="jsb-pending-call"><div>{head}</div>{body}{cut}</div>'


def _sandbox(record: RunRecord) -> str:
    summary = fmt.run_summary(record)
    status_class = "jsb-error" if record.get("status") == "error" else ""
    parts = [f'<b class="{status_class}">{escape(summary["headline"])}</b>']
    build = record.get("build")
    log = _details("build log", build["log"]) if build and build.get("log") else ""
    if build:
        parts.append(_build(build, summary["build"] or ""))
        if not build.get("error"):
            parts.append(log)
    for label, values in (
        ("inputs", record.get("inputs", {})),
        ("outputs", record.get("outputs", {})),
    ):
        if values:
            rows = "".join(
                f"<tr><td>{escape(name)}</td><td>{escape(str(v.get('type')))}</td>"
                f"<td>{_value(v)}</td></tr>"
                for name, v in values.items()
            )
            parts.append(f'<div>{label}</div><table class="jsb-{label}">{rows}</table>')
    log_of = record.get("requests")
    if log_of is not None:
        parts.append(requests_table(log_of, summary.get("requests") or fmt.requests_line(log_of)))
    error = summary["error"]
    if error:
        parts.append(f'<div class="jsb-error">{escape(fmt.plain(error))}</div>')
    if build and build.get("error"):
        parts.append(log)  # collapsed below the one-line error: the log once, when wanted
    return "".join(parts)  # no stdout/stderr: the cell's stream outputs show them, once


def requests_table(log: RequestLogRecord, line: str) -> str:
    """The requests' line, then (folded) a row per request the record keeps."""
    head = "".join(f"<th>{title}</th>" for title in fmt.REQUEST_COLUMNS)
    body = "".join(
        ("<tr>" if row.get("allowed") else '<tr class="jsb-error">')
        + "".join(f"<td>{escape(cell)}</td>" for cell in fmt.request_cells(row))
        + "</tr>"
        for row in log.get("rows", [])
    )
    kept = len(log.get("rows", []))
    more = log.get("total", 0) - kept
    tail = f'<div class="jsb-muted">{more:,} more not kept</div>' if more > 0 else ""
    table = f'<table class="jsb-requests"><tr>{head}</tr>{body}</table>{tail}' if kept else ""
    return _details(escape(line), None, table) if kept else f"<div>{escape(line)}</div>"


def _value(value: TypedValue) -> str:
    """An input's or output's preview; a linked `File` as a relative link that downloads it
    (an export beside the notebook's ``sandbox-outputs`` folder), a `Dir` as a plain link."""
    link = value.get("link")
    if not link:
        return f"<code>{escape(fmt.file_label(value))}</code>"
    href = escape(quote(str(link.get("path", ""))))
    name = escape(str(link.get("name", "")))
    download = f' download="{name}"' if link.get("kind") == "file" else ""
    return (
        f'<a class="jsb-file" href="{href}"{download}>{name}</a> '
        f'<span class="jsb-muted">{escape(fmt.link_size(link))}</span>'
    )


def _build(build: BuildRecord, line: str) -> str:
    """The build's line (``image TAG: STATE``), a progress bar on Docker's step count and the
    steps it reached (a cached image ran none: just ``cached``)."""
    head = escape(line)
    if build.get("cached"):
        return f'<div class="jsb-build">{head}</div>'
    steps = build.get("steps", [])
    total = fmt.build_steps(build)
    current = build.get("error") or build.get("running")  # the last step reached is not done
    done = max(len(steps) - 1, 0) if current else len(steps)
    bar = f'<progress max="{max(total, 1)}" value="{done}"></progress>'
    step_list = "".join(f"<li>{escape(fmt.clip(step, 160))}</li>" for step in steps)
    live = ""
    if build.get("running") and steps:  # a live record: what the build does right now
        live = f"<div>step {len(steps)} of {total}: {escape(fmt.clip(steps[-1], 160))}</div>"
        live += f'<div class="jsb-muted">{escape(fmt.clip(build.get("line") or "", 160))}</div>'
    return f'<div class="jsb-build">{head} {bar}</div>{live}' + _details(
        "steps", None, f"<ol>{step_list}</ol>"
    )
