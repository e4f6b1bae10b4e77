/**
 * A paused run (issue 11): the calls it waits on, its run id, and Approve / Reject buttons.
 *
 * The renderer cannot reach a kernel (a MIME renderer draws saved outputs with none), so a
 * button asks for its magic to run: it dispatches a bubbling, cancelable `RUN_MAGIC` event;
 * the notebook plugin (`answer.ts`) catches it, inserts a code cell with the magic below the
 * output's cell and runs it, so the continued run's output lands in the notebook and is saved,
 * and cancels the event to say it did. Where nothing catches it (an output view without a
 * notebook) the panel says which magic to run by hand. The answer is kept in the output's
 * metadata, so the buttons stay disabled after a re-render, a save and a reopen.
 */

import { el, ownKeys } from './format';
import { IAnswered, ICallRecord, ITraceRecord, signature } from './records';

/** The event a button dispatches; `detail.code` is the magic to run in a new cell below. */
export const RUN_MAGIC = 'jsb-run-magic';

export interface IRunMagic {
  code: string;
}

/** What a person answered, as kept in the output's metadata under `jupyter-sandbox`. */
export interface IAnswer {
  code: string;
  /** The magic ran in a new cell below (false: no notebook caught it; run it by hand). */
  inserted: boolean;
}

/** Where a renderer keeps the answer: read when drawing, written once on a click. */
export interface IAnswerStore {
  answer: IAnswer | null;
  save(answer: IAnswer): void;
}

/** A run id exactly as the store issues them (`RUN_ID` in jupyter_sandbox/_grammar.py:
 * 12 lowercase hex digits). A saved notebook is untrusted: a record whose run id is anything
 * else is drawn as text, and nothing of it ever goes into a cell. */
export const RUN_ID = /^[0-9a-f]{12}$/;

export function isRunId(runId: unknown): runId is string {
  return typeof runId === 'string' && RUN_ID.test(runId);
}

/** Throws unless `runId` is a run id: the last check before a record's field enters a cell. */
function checked(runId: string): string {
  if (!isRunId(runId)) {
    throw new Error(`not a run id: ${JSON.stringify(String(runId).slice(0, 40))}`);
  }
  return runId;
}

export function approveMagic(runId: string): string {
  return `%orchestrate_approve ${checked(runId)}`;
}

/** Characters JSON.stringify leaves as they are but Python's `str.splitlines` (which IPython
 * splits a cell with) or a terminal treats as a line break or a control: escaped too. */
const SPLITS = /[\u007f-\u009f\u2028\u2029]/g;

/** `reason` as one JSON string literal on one line: every character either itself or a
 * `\uXXXX`/`\n` escape, so no parser between here and the magic (IPython's line splitting,
 * its `{}`/`$` expansion, which the magic turns off anyway, shell-like quoting) reads it as
 * anything else; the magic decodes it with `json.loads`, byte for byte. */
export function reasonLiteral(reason: string): string {
  return JSON.stringify(reason).replace(
    SPLITS,
    c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`
  );
}

/** The Reject button's magic: `--json RUN_ID "reason"` (see `reasonLiteral`), or the run id
 * alone when no reason was typed. */
export function rejectMagic(runId: string, reason: string): string {
  if (!reason) {
    return `%orchestrate_reject ${checked(runId)}`;
  }
  return `%orchestrate_reject --json ${checked(runId)} ${reasonLiteral(reason)}`;
}

/** The headline's words for a paused run's calls, as `orchestrate_summary` says them. */
export function waitingNote(record: ITraceRecord): string {
  if (record.status !== 'paused') {
    return '';
  }
  return record.answered
    ? `; ${answerNote(record.answered)}`
    : `, ${(record.pending ?? []).length} waiting for approval`;
}

/** How a paused run was answered, in a few words (`answer_note` in display/_format.py). */
export function answerNote(answered: IAnswered): string {
  if (answered.how === 'elsewhere') {
    return 'continued elsewhere' + (answered.status ? ` (now ${answered.status})` : '');
  }
  const where = answered.cell === null || answered.cell === undefined ? '' : ` in cell [${answered.cell}]`;
  if (answered.how === 'approved') {
    return `approved${where}`;
  }
  return `rejected${where}` + (answered.reason ? `: ${answered.reason}` : ' (no reason given)');
}

/** Where the run's state came from, under its headline (`origin_notes` in _format.py). */
export function originNotes(record: ITraceRecord): string[] {
  const notes: string[] = [];
  if (record.forked_from) {
    notes.push(`forked from run ${record.forked_from.run_id} at call ${record.forked_from.call}`);
  }
  if (record.session) {
    notes.push(`session ${record.session}`);
  }
  if (record.run_id && record.status !== 'paused') {
    notes.push(`run ${record.run_id}`); // a paused run says it in its panel
  }
  return notes;
}

/** What a paused record whose run id is not one the store issues says instead of its buttons
 * (`INVALID_RUN_NOTE` in jupyter_sandbox/display/_format.py). */
export const INVALID_NOTE =
  "this record's run id is not one jupyter-sandbox issues (12 hex digits): the notebook was " +
  'edited, so it offers no button and no magic to run';

let panels = 0;

/** The panel of a paused run. `store` is null for a nested record: no buttons there. */
export function renderApproval(record: ITraceRecord, store: IAnswerStore | null): HTMLElement {
  const runId = record.run_id ?? '?';
  const valid = isRunId(runId);
  const pending = record.pending ?? [];
  const id = `jsb-approval-${++panels}`;
  const root = el('section', 'jsb-approval');
  root.setAttribute('aria-labelledby', `${id}-heading`);
  const noun = pending.length === 1 ? 'call' : 'calls';
  const waits = record.answered ? 'waited' : 'waits';
  const heading = el('div', 'jsb-heading', `run ${runId} ${waits} for approval of ${pending.length} ${noun}:`);
  heading.id = `${id}-heading`;
  root.appendChild(heading);
  root.appendChild(pendingTable(pending));
  if (!valid) {
    // edited outside jupyter-sandbox: text only, no button, no magic to copy
    root.appendChild(el('div', 'jsb-muted jsb-hint', INVALID_NOTE));
    return root;
  }
  if (record.answered) {
    // answered (here, in a later cell, or elsewhere): a button would only be refused
    const done = el('div', 'jsb-answer jsb-answered', answerNote(record.answered));
    done.setAttribute('role', 'status');
    root.appendChild(done);
    return root;
  }
  const hint = el('div', 'jsb-muted jsb-hint', 'or run in any cell, now or after a restart: ');
  hint.append(
    el('code', '', approveMagic(runId)),
    ' or ',
    el('code', '', `%orchestrate_reject ${runId} REASON`),
    ' (the rejected call raises PermissionError(REASON) in the code)'
  );
  if (store === null) {
    root.appendChild(hint);
    return root;
  }
  const status = el('div', 'jsb-answer');
  status.setAttribute('role', 'status');
  const buttons = el('div', 'jsb-buttons');
  const approve = button('Approve', 'jsb-approve');
  const reject = button('Reject\u2026', 'jsb-reject');
  approve.setAttribute('aria-describedby', heading.id);
  reject.setAttribute('aria-describedby', heading.id);
  buttons.append(approve, reject);
  const form = reasonForm(id, runId, code => answer(code));
  root.append(buttons, form, status, hint);

  function show(done: IAnswer): void {
    for (const node of root.querySelectorAll<HTMLButtonElement | HTMLInputElement>('button, input')) {
      node.disabled = true;
    }
    form.hidden = true; // the line below says the whole magic, reason included
    hint.hidden = true; // answered: no other way to answer to offer
    status.textContent = done.inserted
      ? `Ran ${done.code} in a new cell below: the run continues there.`
      : `No notebook here to run it in: run ${done.code} in a cell of the run's notebook.`;
  }

  function answer(code: string): void {
    const event = new CustomEvent<IRunMagic>(RUN_MAGIC, {
      bubbles: true,
      cancelable: true,
      detail: { code }
    });
    const inserted = !root.dispatchEvent(event);
    const done = { code, inserted };
    show(done);
    if (inserted) {
      store?.save(done); // a re-render, a save and a reopen keep the buttons disabled
    }
  }

  approve.addEventListener('click', () => answer(approveMagic(runId)));
  reject.addEventListener('click', () => {
    form.hidden = false;
    reject.setAttribute('aria-expanded', 'true');
    form.querySelector('input')?.focus();
  });
  form.addEventListener('reset', () => {
    form.hidden = true;
    reject.setAttribute('aria-expanded', 'false');
    reject.focus();
  });
  reject.setAttribute('aria-expanded', 'false');
  reject.setAttribute('aria-controls', form.id);
  if (store.answer) {
    show(store.answer);
  }
  return root;
}

function button(text: string, className: string): HTMLButtonElement {
  const node = ownKeys(el('button', className, text));
  node.type = 'button';
  node.dataset.jsbKey = className;
  return node;
}

/** Reject's inline form: an optional reason (Enter rejects, Escape or Cancel closes it). */
function reasonForm(id: string, runId: string, reject: (code: string) => void): HTMLFormElement {
  const form = ownKeys(el('form', 'jsb-reason'));
  form.id = `${id}-reason`;
  form.hidden = true;
  const label = el('label', '', 'Reason (optional): ');
  label.htmlFor = `${id}-input`;
  const input = ownKeys(el('input'));
  input.type = 'text';
  input.id = `${id}-input`;
  input.dataset.jsbKey = 'reason';
  // by hand: inside a notebook's output, Enter in a field does not submit its form
  input.addEventListener('keydown', event => {
    if (event.key === 'Escape' || event.key === 'Enter') {
      event.preventDefault();
      if (event.key === 'Escape') {
        form.reset();
      } else {
        form.requestSubmit();
      }
    }
  });
  const submit = button('Reject run', 'jsb-reject-confirm');
  submit.type = 'submit';
  const cancel = button('Cancel', 'jsb-cancel');
  cancel.type = 'reset';
  form.append(label, input, submit, cancel);
  form.addEventListener('submit', event => {
    event.preventDefault();
    reject(rejectMagic(runId, input.value));
  });
  return form;
}

function pendingTable(pending: ICallRecord[]): HTMLElement {
  const table = el('table', 'jsb-pending');
  for (const call of pending) {
    const tr = table.appendChild(el('tr'));
    tr.appendChild(el('td', '', `#${call.call_id}`));
    tr.appendChild(el('td', 'jsb-signature', signature(call)));
    tr.appendChild(el('td', 'jsb-muted', call.line === null ? '' : `line ${call.line}`));
  }
  return table;
}
