// Toasts: a short note of what just happened (saved, moved, failed) in the corner, gone after a
// few seconds or on Dismiss. One live region per page; a toast whose text a form already
// announces in its own status region is ``quiet`` (shown, not read twice to screen readers).
import { useEffect, useState } from "preact/hooks";
import { html } from "../html";

export type Toast = { id: number; text: string; kind: "ok" | "error"; quiet: boolean; undo?: () => void };

let next = 1;
let shown: Toast[] = [];
const listeners = new Set<(t: Toast[]) => void>();
const LIFETIME_MS = 6000;

function publish(list: Toast[]): void {
  shown = list;
  for (const l of listeners) l(shown);
}

export function dismiss(id: number): void {
  publish(shown.filter((t) => t.id !== id));
}

export function toast(text: string, kind: Toast["kind"] = "ok", quiet = true, undo?: () => void): void {
  const t: Toast = { id: next++, text, kind, quiet, undo };
  publish([...shown.slice(-3), t]);
  setTimeout(() => dismiss(t.id), LIFETIME_MS);
}

export function Toasts() {
  const [list, setList] = useState(shown);
  useEffect(() => {
    listeners.add(setList);
    return () => void listeners.delete(setList);
  }, []);
  const item = (t: Toast) => html`<div key=${t.id} class=${`toast ${t.kind}`}>
    <span>${t.text}</span>
    ${t.undo && html`<button type="button" onClick=${() => { dismiss(t.id); t.undo?.(); }}>Undo</button>`}
    <button type="button" aria-label="Dismiss message" onClick=${() => dismiss(t.id)}>×</button>
  </div>`;
  // quiet toasts outside the live region (their form's status already said it); the others in it
  return html`<div class="toasts">
    ${list.filter((t) => t.quiet).map(item)}
    <div class="toast-live" aria-live="polite">${list.filter((t) => !t.quiet).map(item)}</div>
  </div>`;
}
