/**
 * The `%%orchestrate` trace: summary, a per-tool summary (count, errors, total, p50/p95) when
 * the trace is long, a sortable call table in a scroll box whose last column is a timeline
 * (bars on the run's time axis, so overlapping calls are visible), errors expandable to the
 * host traceback, and nested records (a sandbox used as a tool) rendered inline. The code's
 * stdout is not repeated here: the cell's stream outputs show it.
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
  callDuration,
  callStatus,
  rowStatus,
  signature
} from './records';

/** Rows drawn at once; "show all" draws the rest (100k-call traces stay responsive). */
const ROW_LIMIT = 500;

/** As `SUMMARY_MIN_CALLS` in jupyter_sandbox/_bounds.py: shorter traces show no tool summary. */
const SUMMARY_MIN_CALLS = 10;

/** As `KEEP_EDGE` and `KEEP_FAILED` there: what a long trace's record keeps. */
const KEEP_EDGE = 100;
const KEEP_FAILED = 100;

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

export function traceSummary(record: ITraceRecord): string {
  if (record.live) {
    return record.live.summary; // a running cell: counts of every call, not just those listed
  }
  const total = callCount(record);
  const failed = toolRows(record).reduce((sum, row) => sum + row.errors, 0);
  const noun = total === 1 ? 'call' : 'calls';
  return (
    `orchestrate ${record.status} in ${seconds(record.duration)}: ` +
    `${total} tool ${noun}, ${failed} failed${waitingNote(record)}`
  );
}

/** Every call the run made: those listed plus those the record dropped. */
function callCount(record: ITraceRecord): number {
  return record.live?.calls ?? record.calls.length + (record.dropped ?? 0);
}

/** The record's per-tool summary, or one computed from its calls (records saved before). */
export function toolRows(record: ITraceRecord): IToolRow[] {
  if (record.tools) {
    return record.tools;
  }
  const rows = new Map<string, IToolRow & { durations: number[] }>();
  for (const call of record.calls) {
    let row = rows.get(call.tool);
    if (!row) {
      row = { tool: call.tool, calls: 0, errors: 0, total: 0, p50: null, p95: null, durations: [] };
      rows.set(call.tool, row);
    }
    row.calls += 1;
    row.errors += call.error !== null && call.error !== undefined ? 1 : 0;
    const duration = callDuration(call);
    if (duration !== null) {
      row.durations.push(duration);
    }
  }
  return [...rows.values()]
    .map(({ durations, ...row }) => {
      durations.sort((a, b) => a - b);
      const total = durations.reduce((sum, d) => sum + d, 0);
      return { ...row, total, p50: percentile(durations, 0.5), p95: percentile(durations, 0.95) };
    })
    .sort((a, b) => b.total - a.total || (a.tool < b.tool ? -1 : 1));
}

/** Nearest rank, as in Python: a duration some call really took. */
function percentile(ordered: number[], q: number): number | null {
  if (ordered.length === 0) {
    return null;
  }
  return ordered[Math.max(Math.ceil(q * ordered.length) - 1, 0)];
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

/** What a bounded record left out, in one line, as the Python renderers say it. */
function droppedNote(record: ITraceRecord): string | null {
  const dropped = record.dropped ?? 0;
  if (!dropped) {
    return null;
  }
  return (
    `${dropped.toLocaleString('en')} of ${callCount(record).toLocaleString('en')} calls not ` +
    `kept in the record: it lists the first and last ${KEEP_EDGE} and up to ${KEEP_FAILED} ` +
    'more that did not end ok; the counts and times above cover every call'
  );
}

/** `answers` keeps a paused run's answer (null: a nested record, which has no buttons). */
export function renderTrace(
  record: ITraceRecord,
  renderChild: (child: IRecord) => HTMLElement,
  sort: ISortState,
  answers: IAnswerStore | null = null
): HTMLElement {
  const root = el('div', `jsb-trace jsb-status-${record.status}`);
  root.appendChild(el('div', 'jsb-summary', traceSummary(record)));
  for (const note of originNotes(record)) {
    root.appendChild(el('div', 'jsb-muted jsb-origin', note));
  }
  if (record.status === 'paused') {
    root.appendChild(renderApproval(record, answers));
  }
  if (callCount(record) >= SUMMARY_MIN_CALLS) {
    root.appendChild(toolsTable(toolRows(record)));
  }
  const note = droppedNote(record);
  if (note) {
    root.appendChild(el('div', 'jsb-muted', note));
  }
  if (record.calls.length > 0) {
    root.appendChild(new CallTable(record, renderChild, sort).node);
  }
  if (record.value !== null && record.value !== undefined && record.status !== 'paused') {
    // a paused run has no value yet: the cell that continues it shows the value
    const value = el('div', 'jsb-value', 'value: ');
    value.appendChild(el('code', '', record.value));
    root.appendChild(value);
  }
  if (record.error && !record.raised) {
    // raised: the cell's error output shows the error; the record does not repeat it
    root.appendChild(
      details(record.error, record.sandbox_traceback || record.error, true, 'jsb-error')
    );
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
    // a scroll box of bounded height: 800 calls are 20 rows of the page, not 9,000 px of it
    const scroll = this.node.appendChild(el('div', 'jsb-scroll'));
    scroll.dataset.jsbKey = 'calls-scroll';
    scroll.appendChild(table);
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
    this.body.replaceChildren(...calls.slice(0, limit).map(c => this.row(c)));
    const hidden = calls.length - Math.min(calls.length, limit);
    this.more.textContent = `show all (${hidden} more calls)`;
    this.more.hidden = hidden <= 0;
  }

  private row(call: ICallRecord): HTMLTableRowElement {
    const status = rowStatus(call, this.record);
    const tr = el('tr', `jsb-call jsb-${status}`);
    tr.appendChild(el('td', '', String(call.call_id)));
    tr.appendChild(el('td', 'jsb-tool', call.tool));
    const sig = el('td', 'jsb-signature', signature(call));
    for (const [index, child] of (call.children ?? []).entries()) {
      const box = el('details', 'jsb-child');
      box.dataset.jsbKey = `child-${call.call_id}-${index}`;
      box.appendChild(ownKeys(el('summary', '', `${child.kind} record`)));
      box.appendChild(this.renderChild(child));
      if (child.kind === 'sandbox') {
        box.append(...streamTails(child)); // a tool's run did not stream into the cell
      }
      sig.appendChild(box);
    }
    tr.appendChild(sig);
    const result = el('td', 'jsb-result');
    if (status === 'error' || status === 'cancelled') {
      const error = details(call.error ?? '', call.host_traceback || call.error || '', false);
      error.classList.add('jsb-error');
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
