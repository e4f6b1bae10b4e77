"""Records as plain text: what the terminal, logs and ``text/plain`` readers see."""

from __future__ import annotations

from typing import cast

from jupyter_sandbox.records import (
    CallRecord,
    Record,
    RequestLogRecord,
    RunRecord,
    ToolRow,
    TraceRecord,
)

from . import _format as fmt


def render(record: Record) -> str:
    """The whole record as text; dispatches on ``kind``."""
    if record.get("kind") == "orchestrate":
        return _orchestrate(cast(TraceRecord, record))
    return _sandbox(cast(RunRecord, record))


def _orchestrate(record: TraceRecord) -> str:
    """As the HTML says it (`fmt.trace_summary`): no value (the cell's result), no stdout."""
    summary = fmt.trace_summary(record)
    lines = [summary["headline"], *summary["notes"]]
    if record.get("status") == "paused":
        lines += _paused(record)
    if summary["tools"]:
        lines += _tools(fmt.tool_rows(record))
    if summary["kept"]:
        lines.append(summary["kept"])
    calls = record.get("calls", [])
    # Replayed rows carry a marker; the others are padded to it so the columns stay aligned.
    mark = " (replayed)"
    blank = " " * len(mark) if any(call.get("replayed") for call in calls[: fmt.ROWS_SHOWN]) else ""
    for call in calls[: fmt.ROWS_SHOWN]:
        printed = summary["marks"].get(str(call.get("call_id")))
        if printed:
            lines += [f"  {line}" for line in printed.splitlines()]
        result = call.get("error") if call.get("error") is not None else call.get("result")
        ended = "" if call.get("end") is None else f" -> {fmt.clip(str(result), 60)}"
        lines.append(
            f"  #{call.get('call_id')} {fmt.row_status(call, record):9}"
            f"{mark if call.get('replayed') else blank} "
            f"{fmt.seconds(fmt.call_duration(call)):>8}  "
            f"{fmt.call_signature(call)}{ended}"
        )
    if len(calls) > fmt.ROWS_SHOWN:
        lines.append(f"  ... {len(calls) - fmt.ROWS_SHOWN} more calls in the JSON record")
    if record.get("error") and not record.get("raised"):  # raised: the error output has it
        lines.append(f"error: {record['error']}")
        traceback = record.get("sandbox_traceback")
        if traceback:
            lines.append(traceback.rstrip())
    if record.get("advice"):
        lines.append(str(record.get("advice")))
    return "\n".join(lines)


def _paused(record: TraceRecord) -> list[str]:
    """The calls a paused run waits on and the magics that answer it."""
    magics = fmt.approval_magics(record)
    calls = [line for call in record.get("pending", []) for line in _pending(call, record)]
    if record.get("answered"):  # the headline says how it was answered
        return [fmt.paused_heading(record), *calls]
    if magics is None:
        return [fmt.paused_heading(record), *calls, f"({fmt.INVALID_RUN_NOTE})"]
    return [
        fmt.paused_heading(record),
        *calls,
        f"approve: {magics[0]}",
        f"reject:  {magics[1]}",
        f"({fmt.REJECT_NOTE})",
    ]


def _pending(call: CallRecord, record: TraceRecord) -> list[str]:
    """A paused call: its number, tool, line and the tool's summary, then each argument on
    lines of its own, whole up to `fmt.PENDING_SHOWN` (and what was cut, said)."""
    summary = fmt.tool_summary(call)
    head = f"  #{call.get('call_id')} {fmt.clip(str(call.get('tool', '?')), 80)}"
    head += "".join(f"  {part}" for part in (fmt.line_of(call), summary) if part)
    arguments = fmt.pending_arguments(call)
    lines = [head] if arguments else [head, "      (no arguments)"]
    for argument in arguments:
        text = argument.text.replace("\n", "\n        ")
        space = "" if argument.label.endswith("=") else " "
        lines.append(f"      {argument.label}{space}{text}")
    note = fmt.cut_note(arguments, record.get("run_id"))
    return [*lines, f"      {note}"] if note else lines


def _tools(rows: list[ToolRow]) -> list[str]:
    """The per-tool summary as an aligned table: tool names left, numbers right."""
    table = [list(fmt.TOOL_COLUMNS), *(fmt.tool_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(fmt.TOOL_COLUMNS))]
    return [
        "  "
        + line[0].ljust(widths[0])
        + "".join(f"  {c:>{w}}" for c, w in zip(line[1:], widths[1:], strict=True))
        for line in table
    ]


def _sandbox(record: RunRecord) -> str:
    summary = fmt.run_summary(record)
    lines = [summary["headline"]]
    build = record.get("build")
    if summary["build"]:
        lines.append(summary["build"])
    for label, values in (
        ("inputs", record.get("inputs", {})),
        ("outputs", record.get("outputs", {})),
    ):
        for name, value in values.items():
            lines.append(f"{label[:-1]} {name}: {value.get('type')} = {fmt.file_label(value)}")
    log = record.get("requests")
    if log is not None:
        lines += _requests(log, summary.get("requests") or fmt.requests_line(log))
    error = summary["error"]
    if error:
        lines.append(f"error: {fmt.plain(error)}")
    if build and build.get("error"):  # below its one line, the log it came from, once
        tail, before = fmt.build_log_tail(build)
        more = f"; {before} earlier lines in the JSON record" if before else ""
        lines.append(f"build log (last {len(tail)} lines{more}):")
        lines += [f"  {line}" for line in tail]
    return "\n".join(lines)


def _requests(log: RequestLogRecord, line: str) -> list[str]:
    """The requests' line, then the first `fmt.REQUESTS_SHOWN` rows as an aligned table."""
    rows = log.get("rows", [])[: fmt.REQUESTS_SHOWN]
    if not rows:
        return [line]
    table = [list(fmt.REQUEST_COLUMNS), *(fmt.request_cells(row) for row in rows)]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(fmt.REQUEST_COLUMNS))]
    lines = [line]
    lines += [
        "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        for cells in table
    ]
    more = log.get("total", 0) - len(rows)
    if more > 0:
        kept = len(log.get("rows", []))
        lines.append(f"  ... {more:,} more (the JSON record keeps {kept:,} rows)")
    return lines
