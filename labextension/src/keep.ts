/**
 * What a person did to a rendered record, kept across re-renders. A running cell's record is
 * replaced several times a second (`update_display`): without this, each update would close
 * the details they opened, scroll their log back to the top and drop keyboard focus from the
 * header they just sorted by. Elements that carry state are marked `data-jsb-key`; the same
 * key in the next rendering gets the same state.
 */

/** The table's sort order, shared by every rendering in one output. */
export interface ISortState {
  key: string;
  ascending: boolean;
  showAll: boolean;
}

export function defaultSort(): ISortState {
  return { key: 'call_id', ascending: true, showAll: false };
}

export interface IKept {
  open: Map<string, boolean>;
  scroll: Map<string, [number, number]>;
  focus: string | null;
}

function keyed(root: HTMLElement): HTMLElement[] {
  return Array.from(root.querySelectorAll<HTMLElement>('[data-jsb-key]'));
}

export function keep(root: HTMLElement): IKept {
  const kept: IKept = { open: new Map(), scroll: new Map(), focus: null };
  for (const node of keyed(root)) {
    const key = node.dataset.jsbKey as string;
    if (node instanceof HTMLDetailsElement) {
      kept.open.set(key, node.open);
    }
    if (node.scrollTop || node.scrollLeft) {
      kept.scroll.set(key, [node.scrollTop, node.scrollLeft]);
    }
    if (node === document.activeElement) {
      kept.focus = key;
    }
  }
  return kept;
}

/** Apply `kept` to a rendering that is already in the document (scroll needs layout). */
export function restore(root: HTMLElement, kept: IKept): void {
  for (const node of keyed(root)) {
    const key = node.dataset.jsbKey as string;
    const open = kept.open.get(key);
    if (open !== undefined && node instanceof HTMLDetailsElement) {
      node.open = open;
    }
    const scroll = kept.scroll.get(key);
    if (scroll) {
      [node.scrollTop, node.scrollLeft] = scroll;
    }
    if (kept.focus === key) {
      node.focus();
    }
  }
}
