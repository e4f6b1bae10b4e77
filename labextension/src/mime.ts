/**
 * MIME renderer extension for jupyter-sandbox records. A `mimeExtension` renders outputs that
 * were saved in the notebook, so traces and runs show with no kernel and no widget state.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IRecord } from './records';
import { renderRun } from './run';
import { renderTrace } from './trace';

export const TRACE_MIME = 'application/vnd.jupyter-sandbox.trace+json';
export const RUN_MIME = 'application/vnd.jupyter-sandbox.run+json';

export function renderRecord(record: IRecord): HTMLElement {
  return record.kind === 'orchestrate' ? renderTrace(record, renderRecord) : renderRun(record);
}

class RecordRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private readonly mimeType: string) {
    super();
    this.addClass('jsb-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const record = model.data[this.mimeType] as unknown as IRecord;
    this.node.replaceChildren(renderRecord(record));
    return Promise.resolve();
  }
}

const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [TRACE_MIME, RUN_MIME],
  createRenderer: options => new RecordRenderer(options.mimeType)
};

/** Rank 20: ahead of the text/html fallback (50), behind live widgets (-10). */
const extension: IRenderMime.IExtension = {
  id: 'jupyter-sandbox:records',
  description: 'Renders jupyter-sandbox call traces and sandbox runs.',
  rendererFactory,
  rank: 20,
  dataType: 'json'
};

export default extension;
