// In-app notifications (the ``in_app`` rows the notification channel stores): a header button
// with the unread count, and a panel of the unread ones linking to their records, each marked
// read when opened or all at once. Read from GET /{ws}/api/_notifications (the caller's own).
import { useEffect, useState } from "preact/hooks";
import { call, get } from "../api";
import { useLoad } from "../hooks";
import { html } from "../html";
import type { AppDetail } from "../meta";
import { pageHref } from "../route";
import { recordPageOf } from "../titles";

type Note = { id: string; entity: string | null; record_id: string | null; subject: string | null; body: string | null; created_at: string };

const POLL_MS = 30_000;

export function NotificationsButton({ app }: { app: AppDetail }) {
  const notes = useLoad(() => get<Note[]>("api/_notifications?limit=50").then((a) => a.data), []);
  const [open, setOpen] = useState(false);
  useEffect(() => {
    const timer = setInterval(notes.reload, POLL_MS);
    const onShow = () => document.visibilityState === "visible" && notes.reload();
    document.addEventListener("visibilitychange", onShow);
    return () => {
      clearInterval(timer);
      document.removeEventListener("visibilitychange", onShow);
    };
  }, []);
  if (notes.error) return null; // a workspace without the endpoint or a caller without access
  const list = notes.value ?? [];
  const read = async (ids: string[]) => {
    if (ids.length) await call("POST", "api/_notifications/read", { ids });
    notes.reload();
  };
  const label = list.length ? `Notifications, ${list.length} unread` : "Notifications";
  return html`<div class="notes">
    <button type="button" aria-expanded=${open} aria-controls="notes-panel" aria-label=${label} onClick=${() => setOpen(!open)}>
      <svg aria-hidden="true" width="16" height="16" viewBox="0 0 16 16"><path fill="currentColor" d="M8 1.5a4.5 4.5 0 0 0-4.5 4.5v2.8L2 11v1h12v-1l-1.5-2.2V6A4.5 4.5 0 0 0 8 1.5zM6.3 13a1.7 1.7 0 0 0 3.4 0z"/></svg>${list.length > 0 && html`<span class="unread" aria-hidden="true">${list.length}</span>`}
    </button>
    ${open && html`<section id="notes-panel" class="notes-panel" aria-label="Notifications">
      <div class="table-head"><h2>Notifications</h2>
        ${list.length > 0 && html`<button type="button" onClick=${() => read(list.map((n) => n.id))}>Mark all read</button>`}</div>
      ${list.length === 0 && html`<p class="muted">Nothing new.</p>`}
      <ul>${list.map((n) => {
        const page = n.entity && n.record_id ? recordPageOf(app, n.entity) : null;
        const title = n.subject ?? n.body ?? n.entity ?? "Notification";
        return html`<li>
          ${page ? html`<a href=${pageHref(app.name, page.name, n.record_id)} onClick=${() => { setOpen(false); void read([n.id]); }}>${title}</a>` : html`<strong>${title}</strong>`}
          ${n.subject && n.body && html`<p>${n.body}</p>`}
          <time class="muted" datetime=${n.created_at}>${new Date(n.created_at).toLocaleString()}</time>
          <button type="button" class="link" aria-label=${`Mark read: ${title}`} onClick=${() => read([n.id])}>Mark read</button>
        </li>`;
      })}</ul>
    </section>`}
  </div>`;
}
