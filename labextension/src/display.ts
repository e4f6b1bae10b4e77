/**
 * Renders what a `%%sandbox` cell displayed (a figure, a table, `display()`, its last value):
 * `application/vnd.jupyter-sandbox.display+json` (`DisplayRecord`, records.py). Its HTML,
 * Markdown and SVG were written by the code in the container, so they are drawn as untrusted
 * output whatever the notebook's trust: HTML and Markdown through JupyterLab's own sanitiser
 * (no script, no event handler) and then `clean`, an SVG only as an `<img>` (scripts in an
 * image never run), a PNG/JPEG from its base64, JSON and text as text. The bundle's own
 * `text/html` beside it (sanitised by the kernel with nh3) is for frontends without this
 * extension and for exports.
 *
 * JupyterLab's sanitiser keeps what a notebook's own outputs need and a display must not have:
 * images, media and styles from any address (a sandbox without network sends its data out as
 * `<img src=http://host/?d=...>`, fetched when the notebook is opened, trusted or not), and
 * positioning, `z-index` and JupyterLab's own classes (a `jp-HoverBox` is `position: fixed`
 * over every cell, where a fake panel can ask for an approval). `clean` takes those out, in a
 * document of its own that loads nothing, before any of it joins the page; the display's box
 * (`.jsb-display`, style/index.css) contains its layout and paint besides.
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

/** Elements a display never keeps: each loads, embeds, refreshes or restyles something. */
const DROPPED =
  'script, style, link, meta, base, iframe, frame, frameset, object, embed, applet, portal, ' +
  'noscript, template, source, track';

/** Attributes naming something a browser may fetch (or send to): only an image the display
 * holds (`data:image/...`) stays, except a link's address, which is followed on a click only
 * (JupyterLab's sanitiser checked its scheme). */
const SOURCES = new Set([
  'src',
  'href',
  'xlink:href',
  'poster',
  'background',
  'data',
  'action',
  'formaction',
  'lowsrc',
  'dynsrc',
  'longdesc',
  'ping',
  'cite',
  'codebase',
  'archive',
  'classid',
  'manifest',
  'icon',
  'profile',
  'srcset',
  'imagesrcset'
]);
const LINKS = new Set(['a', 'area']);
const OWN_IMAGE = /^\s*data:image\//i;

/** A CSS value that loads something (`url()`, `image-set()`...), as the browser spells it
 * back (escapes resolved), or an attribute value that could be one. */
const LOADS = /(?:url|image|image-set|cross-fade|element|paint|src)\s*\(|\\/i;

/** Style properties that take a display out of its place in the output. */
const PLACED = new Set(['position', 'z-index', 'inset', 'top', 'right', 'bottom', 'left']);

/** Classes a display may not borrow: JupyterLab's, Lumino's and ours carry their rules. */
const BORROWED = /^(?:jp|lm|jsb)-/i;

/** `root` without anything that loads, embeds or places itself outside its output. */
function clean(root: Element): void {
  root.querySelectorAll(DROPPED).forEach(e => e.remove());
  for (const element of Array.from(root.querySelectorAll('*'))) {
    const tag = element.localName.toLowerCase();
    for (const { name, value } of Array.from(element.attributes)) {
      const key = name.toLowerCase();
      const link = LINKS.has(tag) && (key === 'href' || key === 'xlink:href');
      const own = key !== 'srcset' && OWN_IMAGE.test(value);
      const words = key === 'alt' || key === 'title' || key.startsWith('aria-');
      const loads = key !== 'style' && !words && !link && LOADS.test(value);
      if ((SOURCES.has(key) && !link && !own) || loads) {
        element.removeAttribute(name);
      }
    }
    const style = (element as HTMLElement).style;
    if (style) {
      for (const property of Array.from(style)) {
        if (PLACED.has(property) || LOADS.test(style.getPropertyValue(property))) {
          style.removeProperty(property);
        }
      }
      if (!style.length) {
        element.removeAttribute('style');
      }
    }
    for (const name of Array.from(element.classList)) {
      if (BORROWED.test(name)) {
        element.classList.remove(name);
      }
    }
  }
}

function html(markup: string, sanitizer: IRenderMime.ISanitizer): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-RenderedHTMLCommon jsb-display-html';
  // parsed where nothing loads (not innerHTML: a detached <img> of this page fetches at once)
  const inert = new DOMParser().parseFromString(sanitizer.sanitize(markup), 'text/html');
  clean(inert.body);
  div.replaceChildren(...Array.from(inert.body.childNodes));
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
