/**
 * Syntax highlighting for our cell magics: `%%orchestrate` and `%%sandbox` cells are Python,
 * `%%sandbox --command` cells are shell. JupyterLab picks one language per notebook, so this
 * plugin sets the editor MIME type per cell from its first line and re-applies it whenever
 * the notebook resets it (kernel language changes) or the cell's first line changes.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import answerPausedRuns from './answer';
import fileLinks from './files';
import cellLinks from './goto';
import codemodeInsert from './insert';

const SHELL = 'text/x-sh';
const PYTHON = 'text/x-python';

/** The language a cell's magic asks for, or null for ordinary cells. */
export function magicMimeType(source: string): string | null {
  const first = source.split('\n', 1)[0].trim();
  if (/^%%sandbox(\s|$)/.test(first)) {
    return /\s--command(\s|=|$)/.test(first) ? SHELL : PYTHON;
  }
  return /^%%orchestrate(\s|$)/.test(first) ? PYTHON : null;
}

function watch(panel: NotebookPanel): void {
  const seen = new WeakSet<object>();
  const apply = (): void => {
    const notebook = panel.content;
    for (const cell of notebook.widgets) {
      const model = cell.model;
      if (model.type !== 'code') {
        continue;
      }
      if (!seen.has(model)) {
        seen.add(model);
        model.mimeTypeChanged.connect(apply);
      }
      const wanted = magicMimeType(model.sharedModel.getSource()) ?? notebook.codeMimetype;
      if (model.mimeType !== wanted) {
        model.mimeType = wanted;
      }
    }
  };
  panel.content.modelContentChanged.connect(apply);
  void panel.context.ready.then(apply);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sandbox:magic-highlighting',
  description: 'Highlights %%orchestrate and %%sandbox cells in their own language.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => watch(panel));
  }
};

export default [plugin, codemodeInsert, answerPausedRuns, cellLinks, fileLinks];
