// The header search across the app's entities (Frappe's awesome bar): "/" focuses it from
// anywhere; typing searches each entity the app lists or edits by its title field (ilike through
// the list API, 5 each, 250 ms after the last key) and links to the records' pages.
import { useEffect, useRef, useState } from "preact/hooks";
import { get } from "../api";
import { html } from "../html";
import type { AppDetail, EntityMeta, Row } from "../meta";
import { pageHref } from "../route";
import { entityMeta } from "../store";
import { recordPageOf, recordTitle } from "../titles";

type Hit = { meta: EntityMeta; rows: Row[] };

/** The entities of an app with a record page: what the header search looks through. */
export function searchable(app: AppDetail): string[] {
  const out = new Set<string>();
  for (const c of Object.values(app.components)) if (c.kind === "form" && recordPageOf(app, c.entity)) out.add(c.entity);
  return [...out];
}

const escapeLike = (s: string) => s.replace(/[%_\\]/g, (c) => `\\${c}`);

export function HeaderSearch({ app }: { app: AppDetail }) {
  const [text, setText] = useState("");
  const [hits, setHits] = useState<Hit[] | null>(null);
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (e.key === "/" && !e.ctrlKey && !e.metaKey && !/^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName) && !t.isContentEditable) {
        e.preventDefault();
        input.current?.focus();
      }
    };
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, []);
  useEffect(() => {
    if (!text.trim()) return setHits(null);
    let live = true;
    const handle = setTimeout(async () => {
      const found = await Promise.all(searchable(app).map(async (name): Promise<Hit | null> => {
        try {
          const meta = await entityMeta(name);
          if (!meta.title_field || !meta.api) return null;
          const q = new URLSearchParams({ limit: "5", [`${meta.title_field}[ilike]`]: `%${escapeLike(text.trim())}%` });
          return { meta, rows: (await get<Row[]>(`${meta.api}?${q}`)).data };
        } catch {
          return null; // an entity the caller may not list
        }
      }));
      if (live) setHits(found.filter((h): h is Hit => !!h && h.rows.length > 0));
    }, 250);
    return () => { live = false; clearTimeout(handle); };
  }, [text, app.name]);
  const count = hits?.reduce((n, h) => n + h.rows.length, 0) ?? 0;
  const close = () => { setText(""); setHits(null); };
  return html`<form class="search" role="search" aria-label="Search records" onSubmit=${(e: Event) => e.preventDefault()}
    onKeyDown=${(e: KeyboardEvent) => e.key === "Escape" && close()}>
    <input ref=${input} type="search" aria-label="Search records (press /)" placeholder="Search… ( / )" value=${text}
      aria-describedby="search-count" onInput=${(e: Event) => setText((e.target as HTMLInputElement).value)} />
    <span id="search-count" class="sr-only" aria-live="polite">${hits === null ? "" : `${count} found`}</span>
    ${hits !== null && html`<div class="search-results" aria-label="Search results" role="region">
      ${hits.length === 0 && html`<p class="muted">Nothing found.</p>`}
      ${hits.map((h) => html`<section aria-label=${h.meta.title}><h2>${h.meta.title}</h2><ul>
        ${h.rows.map((r) => { const page = recordPageOf(app, h.meta.name); return html`<li><a href=${page ? pageHref(app.name, page.name, String(r.id)) : "#"} onClick=${close}>${recordTitle(h.meta, r)}</a></li>`; })}
      </ul></section>`)}
    </div>`}
  </form>`;
}
