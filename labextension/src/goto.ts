/**
 * `%orchestrate_pending` names each paused run's cell; in this notebook that name is a link
 * (`a.jsb-cell-link`, `data-jsb-cell` = the cell's id, which the run was keyed by). Following
 * it selects that cell and scrolls it into view. A link to a cell this notebook does not hold
 * (deleted, another notebook's) does nothing.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

/** The index of the cell whose id is `id` in `panel`'s notebook, or -1. */
export function cellIndex(panel: NotebookPanel, id: string): number {
  return panel.content.widgets.findIndex(cell => cell.model.id === id);
}

function follow(tracker: INotebookTracker, event: Event): void {
  const target = event.target instanceof Element ? event.target : null;
  const link = target?.closest<HTMLElement>('a.jsb-cell-link');
  const id = link?.dataset.jsbCell;
  if (!link || !id) {
    return;
  }
  if (event instanceof KeyboardEvent && event.key !== 'Enter') {
    return;
  }
  let found = false;
  tracker.forEach(panel => {
    if (found || !panel.node.contains(link)) {
      return;
    }
    const index = cellIndex(panel, id);
    if (index >= 0) {
      found = true;
      panel.content.activeCellIndex = index;
      void panel.content.scrollToItem(index, 'center');
    }
  });
  event.preventDefault();
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sandbox:cell-links',
  description: "%orchestrate_pending's cell names take you to the cell.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    document.addEventListener('click', event => follow(tracker, event), true);
    document.addEventListener('keydown', event => follow(tracker, event), true);
  }
};

export default plugin;
