/**
 * The notebook side of a paused run's Approve / Reject buttons (see approval.ts): a button
 * asks for a magic to run (a `RUN_MAGIC` event bubbling out of the output); this plugin, which
 * sees the notebook, inserts a code cell holding the magic directly below the cell whose output
 * asked, runs it in the notebook's kernel, and cancels the event to say it did. A new cell,
 * not a silent execution: the continued run's trace and value land in the notebook, are saved
 * with it, and the cell says which magic answered the run.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { IRunMagic, RUN_MAGIC } from './approval';

function watch(panel: NotebookPanel): void {
  const notebook = panel.content;
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
