/**
 * The `%%orchestrate` trace: its words (headline, notes, which calls the record lists, where
 * the cell's output was printed) as the record carries them (`summary`, worded once in
 * jupyter_sandbox/display/_format.py), a per-tool summary when the trace is long, and a
 * sortable call table whose last column is a timeline (bars on the run's time axis, so
 * overlapping calls are visible), errors expandable to the host traceback, and nested records
 * (a sandbox used as a tool) in a row of their own, the table's width. The code's stdout and
 * the cell's value are not repeated here: the cell's stream outputs and result show them.
 */

import { IAnswerStore, originNotes, renderApproval, waitingNote } from './approval';
import { details, el, ownKeys, seconds } from './format';
import { ISortState } from './keep';
import { streamTails } from './run';
import {
  ICallRecord,
  IRecord,
  IToolRow,
  ITraceRecord,
  ITraceSummary,
  callDuration,
  callStatus,
  rowStatus,
  signature
} from './records';

/** Rows drawn at once; "show all" draws the rest. There is no scroll box (one inside the
 * notebook's own scroll hid the rows below it): a saved record lists a bounded number of
 * calls, and a long one starts with this many. */
const ROW_LIMIT = 40;

type SortKey = 'call_id' | 'tool' | 'duration' | 'status' | 'start';

interface IColumn {
  title: string;
  key: SortKey | null;
}

const COLUMNS: IColumn[] = [
  { title: '#', key: 'call_id' },
  { title: 'tool', key: 'tool' },
  { title: 'call', key: null },
  { title: 'result', key: null },
  { title: 'duration', key: 'duration' },
  { title: 'status', key: 'status' },
  { title: 'timeline', key: 'start' }
];

function sortValue(call: ICallRecord, key: SortKey): number | string {
  switch (key) {
    case 'duration':
      return callDuration(call) ?? Number.POSITIVE_INFINITY;
    case 'status':
      return callStatus(call);
    default:
      return call[key];
  }
}

/** The words of a record saved before records carried them: plain counts, no more. */
export function legacyTraceSummary(record: ITraceRecord): ITraceSummary {
  const total = record.live?.calls ?? record.calls.length + (record.dropped ?? 0);
  const noun = total === 1 ? 'call' : 'calls';
  const headline =
    record.live?.summary ??
    `orchestrate ${record.status} in ${seconds(record.duration)}: ${total} tool ${noun}` +
      waitingNote(record);
  return {
    headline,
    notes: originNotes(record),
    kept: record.dropped ? `showing ${record.calls.length} of ${total} calls` : null,
    tools: (record.tools ?? []).length > 0,
    marks: {}
  };
}

function toolsTable(rows: IToolRow[]): HTMLElement {
  const table = el('table', 'jsb-tools');
  const head = el('tr');
  for (const title of ['tool', 'calls', 'errors', 'total', 'p50', 'p95']) {
    const th = el('th', '', title);
    th.scope = 'col';
    head.appendChild(th);
  }
  table.appendChild(el('thead')).appendChild(head);
  const body = table.appendChild(el('tbody'));
  for (const row of rows) {
    const tr = body.appendChild(el('tr'));
    tr.appendChild(el('td', 'jsb-tool', row.tool));
    const cells = [row.calls.toLocaleString('en'), row.errors.toLocaleString('en')];
    cells.push(seconds(row.total), seconds(row.p50), seconds(row.p95));
    for (const text of cells) {
      tr.appendChild(el('td', 'jsb-number', text));
    }
  }
  return table;
}

/** `answers` keeps a paused run's answer (null: a nested record, which has no buttons). */
export function renderTrace(
  record: ITraceRecord,
  renderChild: (child: IRecord) => HTMLElement,
  sort: ISortState,
  answers: IAnswerStore | null = null
): HTMLElement {
  const summary = record.summary ?? legacyTraceSummary(record);
  const root = el('div', `jsb-trace jsb-status-${record.status}`);
  root.appendChild(el('div', 'jsb-summary', summary.headline));
  for (const note of summary.notes) {
    root.appendChild(el('div', 'jsb-muted jsb-origin', note));
  }
  if (record.status === 'paused') {
    root.appendChild(renderApproval(record, answers));
  }
  if (summary.tools && record.tools) {
    root.appendChild(toolsTable(record.tools));
  }
  if (summary.kept) {
    root.appendChild(el('div', 'jsb-muted jsb-kept', summary.kept));
  }
  if (record.calls.length > 0) {
    root.appendChild(new CallTable(record, summary, renderChild, sort).node);
  }
  if (record.error && !record.raised) {
    // raised: the cell's error output shows the error; the record does not repeat it
    root.appendChild(
      details(record.error, record.sandbox_traceback || record.error, true, 'jsb-error')
    );
  }
  if (record.advice) {
    root.appendChild(el('div', 'jsb-advice', record.advice));
  }
  return root;
}

class CallTable {
  readonly node: HTMLElement;
  private readonly body: HTMLTableSectionElement;
  private readonly more: HTMLButtonElement;
  private readonly span: number;

  constructor(
    private readonly record: ITraceRecord,
    private readonly summary: ITraceSummary,
    private readonly renderChild: (child: IRecord) => HTMLElement,
    private readonly sort: ISortState
  ) {
    const ends = record.calls.map(c => c.end ?? c.start);
    this.span = Math.max(record.duration || 0, ...ends, 1e-9);
    this.node = el('div', 'jsb-calls-wrap');
    const table = el('table', 'jsb-calls');
    const head = el('tr');
    for (const column of COLUMNS) {
      head.appendChild(this.header(column));
    }
    table.appendChild(el('thead')).appendChild(head);
    this.body = table.appendChild(el('tbody'));
    this.node.appendChild(table);
    this.more = ownKeys(el('button', 'jsb-more'));
    this.more.type = 'button';
    this.more.dataset.jsbKey = 'more';
    this.more.addEventListener('click', () => {
      this.sort.showAll = true;
      this.draw();
    });
    this.node.appendChild(this.more);
    this.draw();
  }

  /** A sortable column's title is a button (Tab reaches it, Enter and Space sort); the th
   * says the order to assistive tech with `aria-sort`. */
  private header(column: IColumn): HTMLTableCellElement {
    const th = el('th');
    th.scope = 'col';
    if (!column.key) {
      th.textContent = column.title;
      return th;
    }
    const key = column.key;
    th.dataset.key = key;
    const button = ownKeys(el('button', 'jsb-sort', column.title));
    button.type = 'button';
    button.dataset.jsbKey = `sort-${key}`;
    button.addEventListener('click', () => this.sortBy(key));
    th.appendChild(button);
    return th;
  }

  private sortBy(key: SortKey): void {
    this.sort.ascending = this.sort.key === key ? !this.sort.ascending : true;
    this.sort.key = key;
    this.draw();
  }

  private draw(): void {
    const key = this.sort.key as SortKey;
    const sign = this.sort.ascending ? 1 : -1;
    const calls = [...this.record.calls].sort((a, b) => {
      const x = sortValue(a, key);
      const y = sortValue(b, key);
      return x < y ? -sign : x > y ? sign : a.call_id - b.call_id;
    });
    this.node.querySelectorAll<HTMLElement>('th[data-key]').forEach(th => {
      const order = this.sort.ascending ? 'ascending' : 'descending';
      th.setAttribute('aria-sort', th.dataset.key === key ? order : 'none');
    });
    const limit = this.sort.showAll ? Number.POSITIVE_INFINITY : ROW_LIMIT;
    // what was printed between calls reads only in the order the calls were made; a record
    // saved before records kept the printed lines marked only line numbers: it shows none
    const inOrder = (key === 'call_id' || key === 'start') && this.sort.ascending;
    const shown = calls.slice(0, limit);
    const rows = shown.flatMap(call => {
      const kept = inOrder && (call.printed_first ?? []).length > 0;
      const mark = kept ? this.summary.marks[String(call.call_id)] : undefined;
      return [...(mark ? [this.mark(mark)] : []), ...this.rows(call)];
    });
    this.body.replaceChildren(...rows);
    const hidden = calls.length - Math.min(calls.length, limit);
    this.more.textContent = `show all (${hidden} more calls)`;
    this.more.hidden = hidden <= 0;
  }

  /** A row with what the cell printed just before the call under it. */
  private mark(text: string): HTMLTableRowElement {
    const tr = el('tr', 'jsb-mark');
    tr.appendChild(el('td'));
    const cell = tr.appendChild(el('td', 'jsb-muted', text));
    cell.colSpan = COLUMNS.length - 1;
    return tr;
  }

  /** A call's row, then a row the table's width for each nested record (a sandbox used as a
   * tool), collapsed: inside the narrow call column it was squeezed into three lines. */
  private rows(call: ICallRecord): HTMLTableRowElement[] {
    const rows = [this.row(call)];
    for (const [index, child] of (call.children ?? []).entries()) {
      const tr = el('tr', 'jsb-child-row');
      tr.appendChild(el('td'));
      const cell = tr.appendChild(el('td'));
      cell.colSpan = COLUMNS.length - 1;
      const box = cell.appendChild(el('details', 'jsb-child'));
      box.dataset.jsbKey = `child-${call.call_id}-${index}`;
      box.appendChild(ownKeys(el('summary', '', `${child.kind} record of call ${call.call_id}`)));
      box.appendChild(this.renderChild(child));
      if (child.kind === 'sandbox') {
        box.append(...streamTails(child)); // a tool's run did not stream into the cell
      }
      rows.push(tr);
    }
    return rows;
  }

  private row(call: ICallRecord): HTMLTableRowElement {
    const status = rowStatus(call, this.record);
    const tr = el('tr', `jsb-call jsb-${status}`);
    tr.appendChild(el('td', '', String(call.call_id)));
    tr.appendChild(el('td', 'jsb-tool', call.tool));
    const sig = el('td', 'jsb-signature', signature(call));
    tr.appendChild(sig);
    const result = el('td', 'jsb-result');
    if (status === 'error' || status === 'abandoned') {
      const error = details(call.error ?? '', call.host_traceback || call.error || '', false);
      error.classList.add(status === 'error' ? 'jsb-error' : 'jsb-stopped'); // not a failure
      error.dataset.jsbKey = `call-${call.call_id}`;
      result.appendChild(error);
    } else if (status === 'ok') {
      result.textContent = call.result ?? 'None';
    }
    tr.appendChild(result);
    tr.appendChild(el('td', 'jsb-duration', seconds(callDuration(call))));
    tr.appendChild(el('td', 'jsb-state', status + (call.replayed ? ' (replayed)' : '')));
    const timeline = el('td', 'jsb-timeline');
    const bar = el('div', `jsb-bar jsb-${status}`);
    const end = call.end ?? this.span;
    const begins = call.start + (call.queued ?? 0); // the bar is the tool's own time
    bar.style.marginLeft = `${(100 * Math.min(begins, end)) / this.span}%`;
    bar.style.width = `${(100 * Math.max(end - begins, 0)) / this.span}%`;
    // the bar's text: where it starts and how long it takes, for a screen reader and a tooltip
    const waited = call.queued ? `queued ${seconds(call.queued)}, ` : '';
    let label =
      (status === 'queued' ? 'waiting for a slot, ' : waited) +
      `starts at ${seconds(begins)}, ` +
      (call.end === null || call.end === undefined
        ? 'still running'
        : `takes ${seconds(end - begins)}`);
    if (status === 'waiting') {
      // the tool has not run: a mark where the run paused
      bar.style.width = '0';
      label = `waiting for approval since ${seconds(begins)}`;
    }
    bar.setAttribute('role', 'img');
    bar.setAttribute('aria-label', label);
    bar.title = label;
    timeline.appendChild(bar);
    tr.appendChild(timeline);
    return tr;
  }
}
