/**
 * The notebook side of a paused run's Approve / Reject buttons (see approval.ts): a button
 * asks for a magic to run (a `RUN_MAGIC` event bubbling out of the output); this plugin, which
 * sees the notebook, inserts a code cell holding the magic directly below the cell whose output
 * asked, runs it in the notebook's kernel, and cancels the event to say it did. A new cell,
 * not a silent execution: the continued run's trace and value land in the notebook, are saved
 * with it, and the cell says which magic answered the run.
 *
 * It also keeps earlier paused records honest: when a cell has run, or the
 * notebook opens, each paused record with no answer is matched with the first later output of
 * the same run that says how it was continued (`answer`, on the record of the run a magic
 * continued): the paused record gets `answered` (the cell's prompt number), its HTML and text
 * say so too (what an export shows), and it draws without buttons. The kernel that paused a
 * run redraws it itself (`update_display`); this covers a restart and a reopened notebook.
 * A pause no output answers is asked about: the kernel's store says where the run stands
 * (comm target `RUN_STATE`, the run id checked on both sides); one that is no longer paused
 * was continued elsewhere (another notebook, kernel or `resume_run`), and says so.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import type { IOutputModel } from '@jupyterlab/rendermime';
import type { Kernel } from '@jupyterlab/services';

import { IRunMagic, RUN_MAGIC, answerNote, isRunId } from './approval';
import { IAnswered, ITraceRecord } from './records';

const TRACE_MIME = 'application/vnd.jupyter-sandbox.trace+json';

/** The kernel's comm target for a run's state (`RUN_STATE` in jupyter_sandbox/magics). */
const RUN_STATE = 'jupyter_sandbox.run_state';

/** How long an answer from a busy kernel is waited for; the next executed cell asks again. */
const ASK_MS = 10_000;

interface ITraced {
  output: IOutputModel;
  record: ITraceRecord;
  cell: number | null;
}

/** Every trace record in the notebook's outputs, in order, with its cell's prompt number. */
function traces(panel: NotebookPanel): ITraced[] {
  const found: ITraced[] = [];
  const cells = panel.content.model?.cells;
  for (let i = 0; cells && i < cells.length; i++) {
    const model = cells.get(i);
    if (model.type !== 'code') {
      continue;
    }
    const code = model as ICodeCellModel;
    for (let j = 0; j < code.outputs.length; j++) {
      const output = code.outputs.get(j);
      const record = output.data[TRACE_MIME] as unknown as ITraceRecord | undefined;
      if (record && typeof record === 'object') {
        found.push({ output, record, cell: code.executionCount });
      }
    }
  }
  return found;
}

/** Mark each unanswered paused record that a later output of its run answers (see above). */
export function markAnswered(panel: NotebookPanel): void {
  const all = traces(panel);
  all.forEach((paused, index) => {
    const { record } = paused;
    if (record.status !== 'paused' || record.answered || !isRunId(record.run_id)) {
      return;
    }
    const later = all.slice(index + 1).find(t => t.record.run_id === record.run_id && t.record.answer);
    if (later?.record.answer) {
      answer(paused.output, record, { ...later.record.answer, cell: later.cell });
    }
  });
}

/** The unanswered paused records of valid run ids: the ones worth asking about. */
function waiting(panel: NotebookPanel): ITraced[] {
  return traces(panel).filter(
    ({ record }) => record.status === 'paused' && !record.answered && isRunId(record.run_id)
  );
}

/** Run ids a kernel said it does not know (no such run in its store: a forged or foreign
 * record), by kernel id: not asked again. Else a hostile notebook of a thousand forged paused
 * records cost the kernel a thousand store look-ups after every cell a person ran. */
const unknown = new Map<string, Set<string>>();

/** Run ids being asked about now, by kernel id: a look started meanwhile skips them. */
const asking = new Map<string, Set<string>>();

/** Run ids asked at most per look (the first ones; the next executed cell asks the rest). */
const ASK_AT_ONCE = 50;

/** Ask the kernel's store where each waiting run stands; mark those no longer paused. */
export async function askKernel(panel: NotebookPanel): Promise<void> {
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    return;
  }
  const unknownHere = unknown.get(kernel.id) ?? new Set<string>();
  unknown.set(kernel.id, unknownHere);
  const inFlight = asking.get(kernel.id) ?? new Set<string>();
  asking.set(kernel.id, inFlight);
  const asked = new Set<string>();
  for (const traced of waiting(panel)) {
    const runId = traced.record.run_id as string;
    if (unknownHere.has(runId) || inFlight.has(runId) || asked.size >= ASK_AT_ONCE) {
      continue;
    }
    asked.add(runId);
    inFlight.add(runId); // a look after the next cell may start before this one ends
    const status = await runStatus(kernel, runId);
    inFlight.delete(runId);
    if (status === NOT_IN_STORE) {
      unknownHere.add(runId);
      continue;
    }
    const now = traced.output.data[TRACE_MIME] as unknown as ITraceRecord;
    if (status !== null && status !== 'paused' && !now.answered) {
      answer(traced.output, now, { how: 'elsewhere', reason: null, cell: null, status });
    }
  }
}

/** What `runStatus` says when the kernel answered that its store has no such run. */
const NOT_IN_STORE = '';

/** The run's status in the kernel's store; `NOT_IN_STORE` when the kernel answered that its
 * store has no such run; null when no answer came (no extension loaded yet, a busy kernel):
 * then the next executed cell asks again. The reply must name the run asked about. */
function runStatus(kernel: Kernel.IKernelConnection, runId: string): Promise<string | null> {
  return new Promise(resolve => {
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(RUN_STATE);
    } catch {
      resolve(null); // a kernel going away
      return;
    }
    const timer = setTimeout(() => resolve(null), ASK_MS);
    comm.onMsg = msg => {
      clearTimeout(timer);
      const data = msg.content.data as { run_id?: unknown; status?: unknown };
      if (data.run_id === runId && data.status === null) {
        resolve(NOT_IN_STORE);
        return;
      }
      const known = data.run_id === runId && typeof data.status === 'string';
      resolve(known ? (data.status as string) : null);
    };
    comm.onClose = () => {
      clearTimeout(timer);
      resolve(null); // after a reply this changes nothing; without one: unknown target
    };
    comm.open({ run_id: runId });
  });
}

/** Give a paused record its answer, in every MIME type an export or another frontend reads. */
function answer(output: IOutputModel, record: ITraceRecord, answered: IAnswered): void {
  const note = answerNote(answered);
  // the headline is the kernel's words (`orchestrate_summary`): it says the answer, as the
  // kernel that paused the run redraws it, not that a call still waits
  const summary = record.summary && {
    ...record.summary,
    headline: answeredHeadline(record.summary.headline, note)
  };
  const shown = summary ? { ...record, answered, summary } : { ...record, answered };
  const data: Record<string, unknown> = { ...output.data, [TRACE_MIME]: shown };
  if (typeof data['text/html'] === 'string') {
    data['text/html'] = answeredHtml(data['text/html'], note);
  }
  if (typeof data['text/plain'] === 'string') {
    data['text/plain'] = answeredText(data['text/plain'], note);
  }
  output.setData({ data: data as IOutputModel['data'] });
}

/** A paused record's headline (or the text of its first line) as answered: `...: 1 waiting
 * for approval` says `note` instead, as `orchestrate_summary` words an answered one. */
function answeredHeadline(headline: string, note: string): string {
  return headline.replace(/([:,]) \d+ waiting for approval(\n|$)/, `$1 ${note}$2`);
}

/** The kernel's HTML of a paused record (display/_html.py) as answered: its how-to-answer part
 * (`.jsb-how`) goes, its headline says `note` and its heading no longer waits. */
function answeredHtml(html: string, note: string): string {
  const doc = new DOMParser().parseFromString(`<body>${html}</body>`, 'text/html');
  const how = doc.querySelector('.jsb-paused .jsb-how');
  if (how === null) {
    return html; // not ours, or a version before `.jsb-how`: left as it was
  }
  how.replaceChildren();
  for (const node of Array.from(doc.querySelectorAll('b, .jsb-paused > div:first-child'))) {
    const text = node.textContent ?? '';
    if (node.children.length === 0 && / waiting for approval$| waits for approval of /.test(text)) {
      node.textContent = answeredHeadline(text, note).replace(
        ' waits for approval of ',
        ' waited for approval of '
      );
    }
  }
  return doc.body.innerHTML;
}

/** The kernel's text of a paused record (display/_text.py) as answered, as `answeredHtml`. */
function answeredText(text: string, note: string): string {
  const lines = text.split('\n');
  const how = lines.findIndex(line => line.startsWith('approve: %orchestrate_approve '));
  if (how < 0 || !(lines[how + 2] ?? '').startsWith('(REASON is optional')) {
    return text;
  }
  lines.splice(how, 3);
  return answeredHeadline(lines.join('\n'), note).replace(
    / waits for approval of (\d+ calls?:)/,
    ' waited for approval of $1'
  );
}

function watch(panel: NotebookPanel): void {
  const notebook = panel.content;
  const look = (): void => {
    if (!panel.isDisposed) {
      markAnswered(panel);
      void askKernel(panel);
    }
  };
  void panel.context.ready.then(() => markAnswered(panel));
  void panel.sessionContext.ready.then(look);
  NotebookActions.executed.connect((_sender, { notebook: ran }) => {
    if (ran === notebook) {
      look();
    }
  });
  notebook.node.addEventListener(RUN_MAGIC, event => {
    const { code } = (event as CustomEvent<IRunMagic>).detail;
    const index = notebook.widgets.findIndex(cell => cell.node.contains(event.target as Node));
    if (index < 0 || notebook.model === null) {
      return; // not from one of this notebook's outputs: the panel says what to run by hand
    }
    event.preventDefault();
    notebook.model.sharedModel.insertCell(index + 1, { cell_type: 'code', source: code });
    notebook.activeCellIndex = index + 1;
    const cell = notebook.widgets[index + 1];
    void NotebookActions.runCells(notebook, [cell], panel.sessionContext);
  });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sandbox:answer-paused-runs',
  description: "Runs a paused run's Approve / Reject magic in a new cell below its output.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => watch(panel));
  }
};

export default plugin;
