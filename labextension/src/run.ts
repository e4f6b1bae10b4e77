/**
 * The `%%sandbox` run: its words as the record carries them (`summary`, worded once in
 * jupyter_sandbox/display/_format.py), the image build (progress, steps, log; opened on
 * failure), typed inputs and outputs. The container's stdout/stderr are the cell's streams.
 */

import { details, el, ownKeys, plain, seconds, sizeText } from './format';
import { IBuildRecord, IRequestLogRecord, IRequestRow, IRunRecord, IRunSummary, ITypedValue } from './records';

/** Docker's step count (`m` of `Step n/m`); records from before it was kept: the steps reached. */
function buildSteps(build: IBuildRecord): number {
  return build.total_steps || (build.steps ?? []).length;
}

/** The words of a record saved before records carried them: plain facts, no more. */
export function legacyRunSummary(record: IRunRecord): IRunSummary {
  const build = record.build;
  const state = build?.error ? 'failed' : build?.cached ? 'cached' : 'built';
  return {
    headline:
      record.live?.summary ??
      `${runName(record)} ${record.status} in ${seconds(record.duration)}`,
    build: build ? `image ${build.tag}: ${state}` : null,
    error: build?.error || (record.raised ? null : record.error)
  };
}

/** `sandbox 'train'`, or a session's cell: `session analysis · cell 3` (`sandbox_summary`). */
function runName(record: IRunRecord): string {
  return record.session
    ? `session ${record.session} · cell ${record.session_cell ?? '?'}`
    : `sandbox '${record.name}'`;
}

export function renderRun(record: IRunRecord): HTMLElement {
  const summary = record.summary ?? legacyRunSummary(record);
  const root = el('div', `jsb-run jsb-status-${record.status}`);
  root.appendChild(el('div', 'jsb-summary', summary.headline));
  const build = record.build;
  if (build) {
    root.appendChild(renderBuild(build, summary.build ?? ''));
    if (build.log && !build.error) {
      root.appendChild(details('build log', build.log, false, 'jsb-build-log'));
    }
  }
  for (const label of ['inputs', 'outputs'] as const) {
    const values = record[label] ?? {};
    if (Object.keys(values).length > 0) {
      root.appendChild(el('div', 'jsb-heading', label));
      root.appendChild(valuesTable(values, `jsb-${label}`));
    }
  }
  if (record.requests) {
    root.appendChild(requestsBlock(record.requests, summary.requests ?? ''));
  }
  // a raised error is the cell's error output, not repeated here (`record_error` in _format.py)
  if (summary.error) {
    root.appendChild(el('pre', 'jsb-pre jsb-error', plain(summary.error)));
  }
  if (build?.error && build.log) {
    // collapsed below the one-line error: the log once, when wanted
    root.appendChild(details('build log', build.log, false, 'jsb-build-log'));
  }
  // no stdout/stderr: the cell's stream outputs show them, once (the record keeps a tail)
  return root;
}

/** The columns of `request_cells` in jupyter_sandbox/display/_format.py. */
const REQUEST_COLUMNS = ['time', 'method', 'destination', 'path', 'status', 'sent', 'received', ''];

/** A request in the words of `request_cells` (jupyter_sandbox/display/_format.py). */
function requestCells(row: IRequestRow): string[] {
  const host = String(row.host);
  const when = new Date(Number(row.time) * 1000).toISOString().slice(11, 23);
  const result = (row.allowed ? 'allowed' : 'refused') + (row.why ? `: ${row.why}` : '');
  return [
    when,
    String(row.method),
    host.includes(':') ? `[${host}]:${row.port}` : `${host}:${row.port}`,
    String(row.path ?? ''),
    row.status ? String(row.status) : '-',
    sizeText(Number(row.sent) || 0),
    sizeText(Number(row.received) || 0),
    result
  ];
}

/** The requests' line (as the record words it), and a table of every row kept, folded. */
function requestsBlock(log: IRequestLogRecord, words: string): HTMLElement {
  const rows = log.rows ?? [];
  const line = words || `${log.total} requests`;
  if (rows.length === 0) {
    return el('div', 'jsb-requests-line', line);
  }
  const box = el('details', 'jsb-requests');
  box.dataset.jsbKey = 'jsb-requests';
  box.appendChild(ownKeys(el('summary', '', line)));
  const table = box.appendChild(el('table', 'jsb-requests-table'));
  const head = el('tr');
  for (const title of REQUEST_COLUMNS) {
    const th = el('th', '', title);
    th.scope = 'col';
    head.appendChild(th);
  }
  table.appendChild(el('thead')).appendChild(head);
  const body = table.appendChild(el('tbody'));
  for (const row of rows) {
    const tr = body.appendChild(el('tr', row.allowed ? '' : 'jsb-refused'));
    for (const text of requestCells(row)) {
      tr.appendChild(el('td', '', text));
    }
  }
  const more = (log.total ?? rows.length) - rows.length;
  if (more > 0) {
    box.appendChild(el('div', 'jsb-muted', `${more.toLocaleString('en')} more not kept`));
  }
  return box;
}

/** A run's streams as its record keeps them (a tail), collapsed: for a run nested in a trace (a
 * sandbox used as a tool), whose output never streamed into the cell. As `stream_tails` in
 * jupyter_sandbox/display/_format.py. */
export function streamTails(record: IRunRecord): HTMLElement[] {
  const tails: HTMLElement[] = [];
  for (const name of ['stdout', 'stderr'] as const) {
    const text = record[name] ?? '';
    const size = record[`${name}_chars`] ?? text.length;
    if (text) {
      const cut =
        size > text.length
          ? ` (last ${text.length.toLocaleString('en')} of ${size.toLocaleString('en')} characters)`
          : '';
      tails.push(details(name + cut, text, false, `jsb-${name}`));
    }
  }
  return tails;
}

/** State, a progress bar on Docker's step count and the steps reached; the log goes below
 * the run's error (see `renderRun`) so a failed build shows its one line first. */
function renderBuild(build: IBuildRecord, words: string): HTMLElement {
  const box = el('div', 'jsb-build');
  const line = el('div', 'jsb-build-line', `${words} `);
  box.appendChild(line);
  if (build.cached) {
    return box;
  }
  const steps = build.steps ?? [];
  // the last step reached is not done while it runs, nor when it failed
  const done = build.error || build.running ? Math.max(steps.length - 1, 0) : steps.length;
  const progress = el('progress', 'jsb-build-progress');
  progress.max = Math.max(buildSteps(build), 1);
  progress.value = done;
  line.appendChild(progress);
  if (build.running && steps.length > 0) {
    // a live record: the step in progress, and the latest whole line it printed
    const step = `step ${steps.length} of ${buildSteps(build)}: ${steps[steps.length - 1]}`;
    box.appendChild(el('div', 'jsb-build-step', step));
    box.appendChild(el('div', 'jsb-build-current', plain(build.line ?? '')));
  }
  if (steps.length > 0) {
    box.appendChild(details('steps', steps.map((s, i) => `${i + 1}. ${s}`).join('\n')));
  }
  return box;
}

function valuesTable(values: Record<string, ITypedValue>, className: string): HTMLElement {
  const table = el('table', className);
  for (const [name, value] of Object.entries(values)) {
    const tr = el('tr');
    tr.appendChild(el('td', 'jsb-name', name));
    tr.appendChild(el('td', 'jsb-type', value.type));
    tr.appendChild(valueCell(value));
    table.appendChild(tr);
  }
  return table;
}

/** A value's preview; a linked `File`/`Dir` as its name (a link files.ts follows) and size,
 * or the preview and the one-line note saying why it was not linked. */
function valueCell(value: ITypedValue): HTMLElement {
  const cell = el('td', 'jsb-preview');
  const link = value.link;
  if (!link) {
    cell.appendChild(el('code', '', value.preview));
    if (value.note) {
      cell.appendChild(el('div', 'jsb-muted', value.note));
    }
    return cell;
  }
  const anchor = cell.appendChild(el('a', 'jsb-file', String(link.name)));
  anchor.dataset.jsbPath = String(link.path);
  anchor.dataset.jsbKind = link.kind === 'dir' ? 'dir' : 'file';
  anchor.tabIndex = 0;
  anchor.title = `open ${link.path}`;
  cell.appendChild(el('span', 'jsb-muted', ` ${sizeText(Number(link.size) || 0)}`));
  return cell;
}
