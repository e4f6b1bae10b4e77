/**
 * A `%%sandbox` cell's `File`/`Dir` outputs are linked beside the notebook
 * (`sandbox-outputs/...`, jupyter_sandbox/magics/_files.py) and drawn as `a.jsb-file` links
 * (run.ts) whose `data-jsb-path` is relative to the notebook's folder. Following one opens the
 * file in JupyterLab (`docmanager:open`: its own viewer, a new tab) or shows the folder in the
 * file browser. A saved notebook is untrusted: only paths under `sandbox-outputs/` without
 * `..` are followed, so a crafted record cannot open anything else.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';

export const FOLDER = 'sandbox-outputs';

/** `relative` (from a record) joined to the notebook's folder, or null if it is not a path
 * the magic writes (under `sandbox-outputs/`, no `.`/`..`/empty part). */
export function linkedPath(notebookPath: string, relative: string): string | null {
  const parts = relative.split('/');
  if (parts[0] !== FOLDER || parts.length < 2 || parts.some(p => !p || p === '.' || p === '..')) {
    return null;
  }
  const folder = notebookPath.split('/').slice(0, -1);
  return [...folder, ...parts].join('/');
}

function follow(app: JupyterFrontEnd, tracker: INotebookTracker, event: Event): void {
  const target = event.target instanceof Element ? event.target : null;
  const link = target?.closest<HTMLElement>('a.jsb-file');
  if (!link) {
    return;
  }
  if (event instanceof KeyboardEvent && event.key !== 'Enter') {
    return;
  }
  event.preventDefault();
  let notebook: string | null = null;
  tracker.forEach(panel => {
    if (notebook === null && panel.node.contains(link)) {
      notebook = panel.context.path;
    }
  });
  const path = notebook === null ? null : linkedPath(notebook, link.dataset.jsbPath ?? '');
  if (path === null) {
    return;
  }
  const command = link.dataset.jsbKind === 'dir' ? 'filebrowser:go-to-path' : 'docmanager:open';
  void app.commands.execute(command, { path });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-sandbox:file-links',
  description: "A %%sandbox cell's File outputs open in JupyterLab.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    document.addEventListener('click', event => follow(app, tracker, event), true);
    document.addEventListener('keydown', event => follow(app, tracker, event), true);
  }
};

export default plugin;
