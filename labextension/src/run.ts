/**
 * The `%%sandbox` run: summary, the image build (progress, state, steps, log; opened on
 * failure), typed inputs and outputs, and the container's stdout/stderr.
 */

import { details, el, plain, seconds, traceNote } from './format';
import { IBuildRecord, IRunRecord, ITypedValue } from './records';

/** Docker's step count (`m` of `Step n/m`); records from before it was kept: the steps reached. */
function buildSteps(build: IBuildRecord): number {
  return build.total_steps || (build.steps ?? []).length;
}

/** The build's final word, as in the Python renderers. A cached image ran no step: no count.
 * A live record's build that is still going says how far it is. */
export function buildState(build: IBuildRecord): string {
  const steps = buildSteps(build);
  if (build.running) {
    return `building: step ${(build.steps ?? []).length} of ${steps}`;
  }
  if (build.error) {
    const failed = `failed after ${seconds(build.seconds)}`;
    return steps ? `${failed} at step ${(build.steps ?? []).length} of ${steps}` : failed;
  }
  if (build.cached) {
    return 'cached';
  }
  const built = `built in ${seconds(build.seconds)}`;
  return steps ? `${built} (${steps} steps)` : built;
}

export function runSummary(record: IRunRecord): string {
  if (record.live) {
    return record.live.summary; // a running cell: what it does right now
  }
  const bits = [`image ${record.image}`];
  if (record.exit_code !== null && record.exit_code !== undefined) {
    bits.push(`exit ${record.exit_code}`);
  }
  if (record.attempts > 1) {
    // 0 when the build failed: no run to count
    bits.push(`${record.attempts} attempts`);
  }
  if (record.cached) {
    bits.push('result cached');
  }
  const traced = traceNote(record);
  if (traced) {
    bits.push(traced);
  }
  return (
    `sandbox '${record.name}' ${record.status} in ${seconds(record.duration)} ` +
    `(${bits.join(', ')})`
  );
}

export function renderRun(record: IRunRecord): HTMLElement {
  const root = el('div', `jsb-run jsb-status-${record.status}`);
  root.appendChild(el('div', 'jsb-summary', runSummary(record)));
  const build = record.build;
  if (build) {
    root.appendChild(renderBuild(build));
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
  // a raised run error is the cell's error output, not repeated here; a build's error stays
  // here as the heading of its log (as `record_error` in jupyter_sandbox/display/_format.py)
  const error = build?.error || (record.raised ? null : record.error);
  if (error) {
    root.appendChild(el('pre', 'jsb-pre jsb-error', plain(error)));
  }
  if (build?.error && build.log) {
    // collapsed below the one-line error: the log once, when wanted
    root.appendChild(details('build log', build.log, false, 'jsb-build-log'));
  }
  // no stdout/stderr: the cell's stream outputs show them, once (the record keeps a tail)
  return root;
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
function renderBuild(build: IBuildRecord): HTMLElement {
  const box = el('div', 'jsb-build');
  const line = el('div', 'jsb-build-line', `image ${build.tag}: ${buildState(build)} `);
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
    tr.appendChild(el('td', 'jsb-preview')).appendChild(el('code', '', value.preview));
    table.appendChild(tr);
  }
  return table;
}
