/**
 * The `%%sandbox` run: summary, the image build (progress, state, steps, log; opened on
 * failure), typed inputs and outputs, and the container's stdout/stderr.
 */

import { details, el, plain, seconds } from './format';
import { IBuildRecord, IRunRecord, ITypedValue } from './records';

export function buildState(build: IBuildRecord): string {
  if (build.error) {
    return `failed after ${seconds(build.seconds)}`;
  }
  return build.cached ? 'cached' : `built in ${seconds(build.seconds)}`;
}

export function runSummary(record: IRunRecord): string {
  const bits = [`image ${record.image}`];
  if (record.exit_code !== null && record.exit_code !== undefined) {
    bits.push(`exit ${record.exit_code}`);
  }
  if (record.attempts !== 1) {
    bits.push(`${record.attempts} attempts`);
  }
  if (record.cached) {
    bits.push('result cached');
  }
  return (
    `sandbox '${record.name}' ${record.status} in ${seconds(record.duration)} ` +
    `(${bits.join(', ')})`
  );
}

export function renderRun(record: IRunRecord): HTMLElement {
  const root = el('div', `jsb-run jsb-status-${record.status}`);
  root.appendChild(el('div', 'jsb-summary', runSummary(record)));
  if (record.build) {
    root.appendChild(renderBuild(record.build));
  }
  for (const label of ['inputs', 'outputs'] as const) {
    const values = record[label] ?? {};
    if (Object.keys(values).length > 0) {
      root.appendChild(el('div', 'jsb-heading', label));
      root.appendChild(valuesTable(values, `jsb-${label}`));
    }
  }
  if (record.error) {
    root.appendChild(el('pre', 'jsb-pre jsb-error', plain(record.error)));
  }
  // Collapsed: the cell already shows both streams, live; the record keeps them for export.
  if (record.stdout) {
    root.appendChild(details('stdout', record.stdout, false, 'jsb-stdout'));
  }
  if (record.stderr) {
    root.appendChild(details('stderr', record.stderr, false, 'jsb-stderr'));
  }
  return root;
}

function renderBuild(build: IBuildRecord): HTMLElement {
  const box = el('div', 'jsb-build');
  const steps = build.steps ?? [];
  const done = build.error ? Math.max(steps.length - 1, 0) : steps.length;
  const line = el('div', 'jsb-build-line', `image ${build.tag}: ${buildState(build)} `);
  const progress = el('progress', 'jsb-build-progress');
  progress.max = Math.max(steps.length, 1);
  progress.value = steps.length ? done : 1;
  line.appendChild(progress);
  line.appendChild(el('span', '', ` step ${done} of ${steps.length}`));
  box.appendChild(line);
  if (build.error) {
    box.appendChild(el('pre', 'jsb-pre jsb-error', plain(build.error)));
  }
  if (steps.length > 0) {
    box.appendChild(details('steps', steps.map((s, i) => `${i + 1}. ${s}`).join('\n')));
  }
  if (build.log) {
    box.appendChild(details('build log', build.log, !!build.error, 'jsb-build-log'));
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
