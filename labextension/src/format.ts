/**
 * Formatting shared by the trace and run renderers: the same words as the Python text/HTML
 * fallbacks (jupyter_sandbox/display/_format.py), so every view of a run reads alike.
 */

export function seconds(value: number | null | undefined): string {
  if (value === null || value === undefined) {
    return '-';
  }
  if (value < 1e-3) {
    return `${(value * 1e6).toFixed(0)} µs`;
  }
  if (value < 1) {
    return `${(value * 1e3).toFixed(0)} ms`;
  }
  if (value < 60) {
    return `${value.toFixed(2)} s`;
  }
  const minutes = Math.floor(value / 60);
  return `${minutes}m${String(Math.round(value - minutes * 60)).padStart(2, '0')}s`;
}

/** Bytes people read at a glance, as `size_text` in jupyter_sandbox/display/_format.py. */
export function sizeText(size: number): string {
  let value = size;
  for (const unit of ['B', 'KB', 'MB', 'GB']) {
    if (value < 1024 || unit === 'GB') {
      return unit === 'B' ? `${size} B` : `${value.toFixed(1)} ${unit}`;
    }
    value /= 1024;
  }
  return `${size} B`;
}

/** Create an element with a class and optional text: keeps the renderers declarative. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** Keys pressed on `node` (Enter, Space) act on it: JupyterLab's command-mode shortcuts
 * (Enter = edit the cell) would otherwise take them from a focused button or summary. */
export function ownKeys<T extends HTMLElement>(node: T): T {
  node.setAttribute('data-lm-suppress-shortcuts', '');
  return node;
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;

/** Text without ANSI colour codes (docker build logs and tools emit them). */
export function plain(text: string): string {
  return text.replace(ANSI, '');
}

/** A collapsed block for tracebacks and logs: there when wanted, out of the way otherwise.
 * Keyed by class and summary, so a live re-render keeps it open once opened (see keep.ts). */
export function details(summary: string, body: string, open = false, className = ''): HTMLElement {
  const node = el('details', className);
  node.dataset.jsbKey = `${className}:${summary}`;
  node.open = open;
  node.appendChild(ownKeys(el('summary', '', summary)));
  node.appendChild(el('pre', 'jsb-pre', plain(body)));
  return node;
}

/** An OpenTelemetry trace id as the kernel writes it (`_TRACE_ID` in display/_format.py). */
const TRACE_ID = /^[0-9a-f]{32}$/;

/** The note naming a traced run's OpenTelemetry trace (`trace_note` in display/_format.py);
 * null when the record has none, or one the kernel does not write (a saved notebook may lie). */
export function traceNote(record: { trace_id?: unknown }): string | null {
  const id = record.trace_id;
  return typeof id === 'string' && TRACE_ID.test(id) ? `OpenTelemetry trace ${id}` : null;
}
