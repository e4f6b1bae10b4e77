/**
 * MIME renderer extension for jupyter-sandbox records. A `mimeExtension` renders outputs that
 * were saved in the notebook, so traces and runs show with no kernel and no widget state.
 * It also draws a running cell: the live view is the same record, growing, replaced through
 * `update_display`, and JupyterLab hands each update to the same renderer (`renderModel`), so
 * the cell looks the same while it runs and once it is saved.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IAnswer, IAnswerStore } from './approval';
import { displayExtension } from './display';
import { ISortState, defaultSort, keep, restore } from './keep';
import { IRecord } from './records';
import { renderRun } from './run';
import { renderTrace } from './trace';

export const TRACE_MIME = 'application/vnd.jupyter-sandbox.trace+json';
export const RUN_MIME = 'application/vnd.jupyter-sandbox.run+json';

/** The output metadata key under which a paused run's answer is kept (see approval.ts). */
const ANSWER_KEY = 'jupyter-sandbox';

export function renderRecord(
  record: IRecord,
  sort: ISortState = defaultSort(),
  answers: IAnswerStore | null = null
): HTMLElement {
  return record.kind === 'orchestrate'
    ? renderTrace(record, child => renderRecord(child), sort, answers)
    : renderRun(record);
}

/** A paused run's answer lives in its output's metadata: saved with the notebook, so a
 * reopened notebook does not offer to answer the run again. */
function answerStore(model: IRenderMime.IMimeModel): IAnswerStore {
  const kept = model.metadata[ANSWER_KEY] as { answer?: IAnswer } | undefined;
  return {
    answer: kept?.answer ?? null,
    save: answer =>
      model.setData({ metadata: { ...model.metadata, [ANSWER_KEY]: { answer: { ...answer } } } })
  };
}

class RecordRenderer extends Widget implements IRenderMime.IRenderer {
  /** The sort order outlives each rendering: a live trace keeps the order the person chose. */
  private readonly sort = defaultSort();

  constructor(private readonly mimeType: string) {
    super();
    this.addClass('jsb-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const record = model.data[this.mimeType] as unknown as IRecord;
    const kept = keep(this.node);
    let drawn: HTMLElement;
    try {
      drawn = renderRecord(record, this.sort, answerStore(model));
    } catch {
      drawn = unreadable(model);
    }
    this.node.replaceChildren(drawn);
    restore(this.node, kept);
    return Promise.resolve();
  }
}

/** Characters of an unreadable record's text shown (a hostile one may be megabytes). */
const SHOWN_TEXT = 20_000;

/** What a record in a shape the kernel never writes draws instead (a saved notebook is
 * untrusted: `pending` a string, nulls in a list). Before, the renderer threw, and JupyterLab
 * opened the whole notebook with no cells at all, marked changed: saving it then kept an
 * empty notebook. Now that output alone says so and shows the record's plain text, with no
 * button and no magic. */
export function unreadable(model: IRenderMime.IMimeModel): HTMLElement {
  const root = document.createElement('section');
  root.className = 'jsb-unreadable';
  const note = document.createElement('div');
  note.className = 'jsb-muted jsb-hint';
  note.textContent =
    'this record is not in a shape jupyter-sandbox writes (the notebook was edited): shown as ' +
    'its text, with nothing to click';
  const plain = model.data['text/plain'];
  const pre = document.createElement('pre');
  pre.textContent = typeof plain === 'string' ? plain.slice(0, SHOWN_TEXT) : '';
  root.append(note, pre);
  return root;
}

const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [TRACE_MIME, RUN_MIME],
  createRenderer: options => new RecordRenderer(options.mimeType)
};

/** Rank 20: ahead of the text/html fallback (50). */
const extension: IRenderMime.IExtension = {
  id: 'jupyter-sandbox:records',
  description: 'Renders jupyter-sandbox call traces and sandbox runs, live and saved.',
  rendererFactory,
  rank: 20,
  dataType: 'json'
};

export default [extension, displayExtension];
