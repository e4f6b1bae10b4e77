/**
 * `%%codemode --insert` and `%%codegen` re-run: the new cell replaces the one an earlier run
 * inserted.
 *
 * The kernel can only ask for a new cell below the running one (Jupyter's `set_next_input`);
 * it can neither see nor edit the copy an earlier run put there. It marks what it inserts on
 * the second line (`# inserted by %%codemode, cell 3f2a9c1d`, a hash of the source cell), and
 * this plugin, which sees the notebook, finishes the job: when such a cell appears directly
 * below a `%%codemode` cell and another cell further down carries the same mark, that older
 * copy is deleted (Undo brings it back). `%%codegen` inserts a `%%sandbox` cell marked
 * `# inserted by %%codegen, cell 3f2a9c1d` and is handled the same way. Other frontends keep
 * both and the kernel's one line names the older copy to delete.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

/** Each inserting magic: the cell it runs in, the first line and the mark of what it inserts. */
const INSERTERS: { source: RegExp; cell: RegExp; mark: RegExp }[] = [
  {
    source: /^%%codemode(\s|$)/,
    cell: /^%%orchestrate(\s|$)/,
    mark: /^# inserted by %%codemode, cell [0-9a-f]{8}$/
  },
  {
    source: /^%%codegen(\s|$)/,
    cell: /^%%sandbox(\s|$)/,
    mark: /^# inserted by %%codegen, cell [0-9a-f]{8}$/
  }
];

/** The mark of a cell a magic inserted (its second line), or null for any other cell. */
export function insertMark(source: string): string | null {
  const [first, second] = source.split('\n', 2);
  const by = INSERTERS.find(i => i.cell.test(first) && i.mark.test(second ?? ''));
  return by === undefined ? null : second;
}

/** Whether `above` is a cell of the magic that inserts cells marked `mark`. */
function insertedBy(mark: string, above: string): boolean {
  return INSERTERS.some(i => i.mark.test(mark) && i.source.test(above));
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
      if (mark === null || !insertedBy(mark, source)) {
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
  description: 'A re-run %%codemode --insert or %%codegen replaces the cell an earlier run inserted.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_sender, panel) => watch(panel));
  }
};

export default plugin;
