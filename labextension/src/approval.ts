/**
 * A paused run: the calls it waits on, its run id, and Approve / Reject buttons.
 *
 * The renderer cannot reach a kernel (a MIME renderer draws saved outputs with none), so a
 * button asks for its magic to run: it dispatches a bubbling, cancelable `RUN_MAGIC` event;
 * the notebook plugin (`answer.ts`) catches it, inserts a code cell with the magic below the
 * output's cell and runs it, so the continued run's output lands in the notebook and is saved,
 * and cancels the event to say it did. Where nothing catches it (an output view without a
 * notebook) the panel says which magic to run by hand. The answer is kept in the output's
 * metadata, so the buttons stay disabled after a re-render, a save and a reopen.
 *
 * What Approve makes is what the panel shows: each argument whole (its repr, as
 * the record carries it: long ones in a scrollable box with a "show all" toggle), what the
 * record could not carry said in numbers, the notebook variables a handle binds after a
 * restart, and the call's digest, which Approve sends (`--expect`): the kernel makes the
 * call only if it is still the call that digest seals.
 */

import { el, ownKeys, traceNote } from './format';
import { IAnswered, ICallRecord, ITraceRecord } from './records';

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

/** A run id exactly as the store issues them (`RUN_ID` in jupyter_sandbox/_shared/_grammar.py:
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

/** A digest's exact grammar (`DIGEST` in jupyter_sandbox/_shared/_grammar.py: 16 lowercase hex
 * digits). A record's digest that is anything else goes into no magic. */
export const DIGEST = /^[0-9a-f]{16}$/;

/** Approve, sealed to the call shown when its record has a digest (one call waits): the
 * kernel makes the call only if it is still the one that digest seals. */
export function approveMagic(runId: string, digest?: string): string {
  const sealed = digest !== undefined && DIGEST.test(digest) ? ` --expect ${digest}` : '';
  return `%orchestrate_approve ${checked(runId)}${sealed}`;
}

/** Characters past which an argument's box starts collapsed (a few lines that scroll), with a
 * "show all" toggle; shorter ones fit those lines whole at a notebook's usual width. */
const LONG = 600;

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
    ? `, ${answerNote(record.answered)}`
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
  const traced = traceNote(record);
  if (traced) {
    notes.push(traced);
  }
  return notes;
}

/** What a paused record whose run id is not one the store issues says instead of its buttons
 * (`INVALID_RUN_NOTE` in jupyter_sandbox/display/_format.py). */
export const INVALID_NOTE =
  "this record's run id is not one jupyter-sandbox issues (12 hex digits): the notebook was " +
  'edited, so it offers no button and no magic to run';

let panels = 0;

/** What the digest in the hint promises (`SEALED_NOTE` in jupyter_sandbox/display/_format.py). */
export const SEALED = 'Approve makes the call only if it is still the one this digest seals';

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
  root.appendChild(pendingCalls(pending, id));
  // a digest the kernel does not issue goes into no magic: a forged record gets no buttons
  const forged = pending.some(call => call.digest !== undefined && !DIGEST.test(call.digest));
  const digest = pending.length === 1 && !forged ? pending[0].digest : undefined;
  if (!valid) {
    // edited outside jupyter-sandbox: text only, no button, no magic to copy
    root.appendChild(el('div', 'jsb-muted jsb-hint', INVALID_NOTE));
    return root;
  }
  if (record.answered) {
    // answered (here, in a later cell, or elsewhere): a button would only be refused, and the
    // headline above says how it was answered
    return root;
  }
  const hint = el('div', 'jsb-muted jsb-hint');
  if (digest !== undefined) {
    hint.append('digest ', el('span', 'jsb-digest', digest), `: ${SEALED}; `);
  }
  hint.append(
    'or run in any cell, now or after a restart: ',
    el('code', '', approveMagic(runId, digest)),
    ' or ',
    el('code', '', `%orchestrate_reject ${runId} REASON`),
    ' (the rejected call raises PermissionError(REASON) in the code)'
  );
  if (forged) {
    hint.append(
      '; this record holds a digest the kernel does not issue: %orchestrate_pending shows the real one'
    );
  } else if (digest === undefined) {
    hint.append(
      "; this record seals no call with a digest, so it offers no Approve: %orchestrate_pending shows the call the kernel would make and its digest"
    );
  }
  if (store === null || forged) {
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
  // Approve is sealed or absent: unsealed, a record edited to show another call (its digest
  // dropped, or more than one call listed) would approve whatever the run really waits on.
  // Rejecting makes no call: it needs no seal.
  if (digest !== undefined) {
    buttons.append(approve);
  }
  buttons.append(reject);
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

  approve.addEventListener('click', () => answer(approveMagic(runId, digest)));
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

/** Each pending call: its number, tool and line, the tool's summary, every argument whole
 * (the digest is in the hint below, beside the magic that sends it). */
function pendingCalls(pending: ICallRecord[], id: string): HTMLElement {
  const list = el('div', 'jsb-pending');
  pending.forEach((call, at) => {
    const item = list.appendChild(el('div', 'jsb-pending-call'));
    const head = item.appendChild(el('div', 'jsb-call-head'));
    head.append(el('span', 'jsb-signature', `#${call.call_id} ${call.tool}`));
    if (call.line !== null) {
      head.append(el('span', 'jsb-muted', ` line ${call.line}`));
    }
    if (typeof call.doc === 'string' && call.doc) {
      item.append(el('div', 'jsb-muted jsb-tool-doc', visible(call.doc)));
    }
    const params = Array.isArray(call.params) ? call.params : [];
    const args: [string, string][] = [
      ...(Array.isArray(call.args) ? call.args : []).map((t, i): [string, string] => [String(i), t]),
      ...Object.entries(call.kwargs ?? {})
    ];
    if (!args.length) {
      item.append(el('div', 'jsb-muted', 'no arguments'));
    }
    args.forEach(([key, text], j) => {
      const whole = call.cut?.[key]; // a saved record is untrusted: numbers only
      const cut = typeof whole === 'number' ? whole : undefined;
      const name = /^\d+$/.test(key) ? params[Number(key)] : undefined;
      const label = typeof name === 'string' && IDENTIFIER.test(name) ? name : undefined;
      item.append(argument(String(key), String(text), cut, `${id}-${at}-${j}`, label));
    });
    for (const bound of Array.isArray(call.bindings) ? call.bindings : []) {
      const note = el(
        'div',
        'jsb-muted jsb-binding',
        'After a kernel restart this argument is notebook variable '
      );
      note.append(
        el('span', 'jsb-var', String(bound.variable)),
        ` (a ${bound.type}) as it is then, which may not be the object shown: Approve then ` +
          'makes no call and shows the call as it is.'
      );
      item.append(note);
    }
  });
  return list;
}

/** A parameter name as Python spells one (a saved record's `params` is untrusted). */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** One argument, labelled (`name=`: a keyword, or a positional whose parameter the record
 * names; `1.` for a positional it does not), its text in a box that scrolls; a long one
 * starts collapsed with a "show all" toggle (a real button: Tab and Enter reach it), and one
 * the record cut says exactly what is missing. */
function argument(
  key: string,
  text: string,
  whole: number | undefined,
  id: string,
  param?: string
): HTMLElement {
  const row = el('div', 'jsb-arg');
  const positional = /^\d+$/.test(key) && param === undefined;
  const name = param ?? key;
  row.append(el('span', 'jsb-arg-name', positional ? `${Number(key) + 1}.` : `${name}=`));
  const box = ownKeys(el('pre', 'jsb-arg-text', visible(text)));
  box.id = `${id}-text`;
  box.tabIndex = 0; // a keyboard scrolls it
  box.setAttribute('aria-label', positional ? `argument ${Number(key) + 1}` : `argument ${name}`);
  row.append(box);
  if (text.length > LONG || text.includes('\n')) {
    box.classList.add('jsb-collapsed');
    const more = `show all (${text.length.toLocaleString('en')} characters)`;
    const toggle = ownKeys(el('button', 'jsb-show-all', more));
    toggle.type = 'button';
    toggle.dataset.jsbKey = `show-all-${id}`;
    toggle.setAttribute('aria-controls', box.id);
    toggle.setAttribute('aria-expanded', 'false');
    toggle.addEventListener('click', () => {
      const open = box.classList.toggle('jsb-collapsed') === false;
      toggle.setAttribute('aria-expanded', String(open));
      toggle.textContent = open ? 'show less' : more;
    });
    row.append(toggle);
  }
  if (whole !== undefined && whole > text.length) {
    row.append(
      el(
        'div',
        'jsb-cut',
        `Not shown: the last ${(whole - text.length).toLocaleString('en')} of its ` +
          `${whole.toLocaleString('en')} characters (the record keeps the first ` +
          `${text.length.toLocaleString('en')}). %orchestrate_pending --full shows it whole; ` +
          'Approve makes the call only if it is the one the digest seals.'
      )
    );
  }
  return row;
}

/** Characters that reorder or hide the text around them (bidirectional controls, zero-width
 * marks): an object's own `__repr__` may return them, to make `/home/alice` read as another
 * path. Shown as their escapes, as Python's `repr` of a string already does. */
// eslint-disable-next-line no-control-regex
const HIDING = /[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;

function visible(text: string): string {
  return text.replace(HIDING, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
