/**
 * Renders what a `%%sandbox` cell displayed (a figure, a table, `display()`, its last value):
 * `application/vnd.jupyter-sandbox.display+json` (`DisplayRecord`, records.py). Its HTML,
 * Markdown and SVG were written by the code in the container, so they are drawn as untrusted
 * output whatever the notebook's trust: HTML and Markdown through JupyterLab's own sanitiser
 * (no script, no event handler, no style that escapes the output), an SVG only as an `<img>`
 * (scripts in an image never run), a PNG/JPEG from its base64, JSON and text as text. The
 * bundle's own `text/html` beside it (sanitised by the kernel with nh3) is for frontends
 * without this extension and for exports.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IDisplayRecord } from './records';

export const DISPLAY_MIME = 'application/vnd.jupyter-sandbox.display+json';

/** The order a notebook prefers them in: the richest first. */
const ORDER = [
  'text/html',
  'text/markdown',
  'image/svg+xml',
  'image/png',
  'image/jpeg',
  'application/json',
  'text/plain'
];

/** Characters of text or JSON shown (the kernel bounds a run's displays; a saved notebook
 * is untrusted and may hold anything). */
const SHOWN_TEXT = 200_000;

function text(body: string, className: string): HTMLElement {
  const pre = document.createElement('pre');
  pre.className = className;
  pre.textContent = body.slice(0, SHOWN_TEXT);
  return pre;
}

function html(markup: string, sanitizer: IRenderMime.ISanitizer): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-RenderedHTMLCommon jsb-display-html';
  div.innerHTML = sanitizer.sanitize(markup);
  return div;
}

function image(src: string): HTMLElement {
  const img = document.createElement('img');
  img.className = 'jsb-display-image';
  img.alt = 'image the sandbox displayed';
  img.src = src;
  return img;
}

/** base64 of `svg`'s UTF-8 bytes. */
function base64(svg: string): string {
  const bytes = new TextEncoder().encode(svg);
  let binary = '';
  bytes.forEach(b => (binary += String.fromCharCode(b)));
  return btoa(binary);
}

/** The element for one display (an empty note when nothing in it can be drawn). */
export async function renderDisplay(
  record: IDisplayRecord,
  options: IRenderMime.IRendererOptions
): Promise<HTMLElement> {
  const data = record?.data ?? {};
  const mime = ORDER.find(m => m in data && data[m] !== null && data[m] !== undefined);
  const value = mime === undefined ? undefined : data[mime];
  if (mime === 'application/json') {
    return text(JSON.stringify(value, null, 2) ?? '', 'jsb-display-text');
  }
  if (typeof value !== 'string') {
    return text('(nothing this display holds can be shown)', 'jsb-display-text jsb-muted');
  }
  switch (mime) {
    case 'text/html':
      return html(value, options.sanitizer);
    case 'text/markdown': {
      const parser = options.markdownParser;
      return parser
        ? html(await parser.render(value), options.sanitizer)
        : text(value, 'jsb-display-text');
    }
    case 'image/svg+xml':
      return image(`data:image/svg+xml;base64,${base64(value)}`);
    case 'image/png':
    case 'image/jpeg':
      return image(`data:${mime};base64,${value.replace(/[^A-Za-z0-9+/=]/g, '')}`);
    default:
      return text(value, 'jsb-display-text');
  }
}

class DisplayRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(private readonly options: IRenderMime.IRendererOptions) {
    super();
    this.addClass('jsb-display');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const record = model.data[DISPLAY_MIME] as unknown as IDisplayRecord;
    this.node.replaceChildren(await renderDisplay(record, this.options));
  }
}

/** Rank 20: ahead of the sanitised text/html fallback beside it. */
export const displayExtension: IRenderMime.IExtension = {
  id: 'jupyter-sandbox:displays',
  description: 'Renders what a %%sandbox cell displayed, as untrusted output.',
  rendererFactory: {
    safe: true,
    mimeTypes: [DISPLAY_MIME],
    createRenderer: options => new DisplayRenderer(options)
  },
  rank: 20,
  dataType: 'json'
};
