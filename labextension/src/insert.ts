/**
 * `%%codemode --insert` re-run: the new cell replaces the one an earlier run inserted.
 *
 * The kernel can only ask for a new cell below the running one (Jupyter's `set_next_input`);
 * it can neither see nor edit the copy an earlier run put there. It marks what it inserts on
 * the second line (`# inserted by %%codemode, cell 3f2a9c1d`, a hash of the source cell), and
 * this plugin, which sees the notebook, finishes the job: when such a cell appears directly
 * below a `%%codemode` cell and another cell further down carries the same mark, that older
 * copy is deleted (Undo brings it back). Other frontends keep both and the kernel's one line
 * names the older copy to delete.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

const MARK = /^# inserted by %%codemode, cell [0-9a-f]{8}$/;

/** The mark of a cell `--insert` wrote (its second line), or null for any other cell. */
export function insertMark(source: string): string | null {
  const [first, second] = source.split('\n', 2);
  return /^%%orchestrate(\s|$)/.test(first) && MARK.test(second ?? '') ? second : null;
}

function watch(panel: NotebookPanel): void {
  void panel.context.ready.then(() => {
    const model = panel.content.model;
    if (model === null) {
      return;
    }
    model.cells.changed.connect((cells, change) => {
      if (change.type !== 'add' || change.newValues.length !== 1 || change.newIndex < 1) {
        return; // a load or a paste of several cells: no kernel inserted these
      }
      const mark = insertMark(change.newValues[0].sharedModel.getSource());
      const source = cells.get(change.newIndex - 1).sharedModel.getSource();
      if (mark === null || !/^%%codemode(\s|$)/.test(source)) {
        return;
      }
      for (let index = change.newIndex + 1; index < cells.length; index++) {
        if (insertMark(cells.get(index).sharedModel.getSource()) === mark) {
          const older = cells.get(index).sharedModel;
          // not while the list is still announcing the insert
          setTimeout(() => {
            const at = model.sharedModel.cells.indexOf(older);
            if (at >= 0) {
              model.sharedModel.deleteCell(at);
            }
          }, 0);
          return;
        }
      }
    });
  });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sandbox:codemode-insert',
  description: 'A re-run %%codemode --insert replaces the cell an earlier run inserted.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => watch(panel));
  }
};

export default plugin;
