// A record's related lists: for each one-to-many relation into its entity (``related`` in the
// metadata), the first rows of the other entity that point at this record, through the list API
// (so permissions and row scope are the API's), each linking to its own page when the app has one.
import { get } from "../api";
import { useLive, useLoad } from "../hooks";
import { html } from "../html";
import type { AppDetail, EntityMeta, Row } from "../meta";
import { pageHref } from "../route";
import { entityMeta } from "../store";
import { recordPageOf, recordTitle } from "../titles";

const SHOWN = 10;

export function RelatedLists({ app, meta, id }: { app: AppDetail; meta: EntityMeta; id: string }) {
  const lists = meta.related ?? [];
  if (!lists.length) return null;
  return html`<div class="related">${lists.map((r) => html`<${RelatedList} app=${app} entity=${r.entity} field=${r.field} title=${r.title} id=${id} />`)}</div>`;
}

function RelatedList({ app, entity, field, title, id }: { app: AppDetail; entity: string; field: string; title: string; id: string }) {
  const loaded = useLoad(async () => {
    const other = await entityMeta(entity);
    const answer = await get<Row[]>(`${other.api}?${field}=${encodeURIComponent(id)}&limit=${SHOWN}&count=true`);
    return { other, rows: answer.data, total: answer.total ?? answer.data.length };
  }, [entity, field, id]);
  useLive(entity, null, loaded.reload);
  const hid = `rel-${entity.replace("/", "-")}-${field}`;
  const target = recordPageOf(app, entity);
  const v = loaded.value;
  return html`<section class="related-list" aria-labelledby=${hid}>
    <h3 id=${hid}>${title}${v ? html` <span class="count">(${v.total})</span>` : ""}</h3>
    ${loaded.error && html`<p class="muted">${loaded.error.message}</p>`}
    ${v && v.rows.length === 0 && html`<p class="muted">None yet.</p>`}
    ${v && v.rows.length > 0 && html`<ul>${v.rows.map((row) => {
      const name = recordTitle(v.other, row);
      return html`<li>${target ? html`<a href=${pageHref(app.name, target.name, String(row.id))}>${name}</a>` : name}</li>`;
    })}</ul>`}
    ${v && v.total > v.rows.length && html`<p class="muted">${v.rows.length} of ${v.total} shown.</p>`}
  </section>`;
}
