// A Table manifest: user filters (FilterSpec), sortable columns, paging, column choice; rows open
// their form page, or select a record for a bound block of a split page.
import { useState } from "preact/hooks";
import { get } from "../api";
import { useLive, useLoad } from "../hooks";
import { html } from "../html";
import { canEdit, filterDefault, formatValue, listQuery, nextSort, visibleFields } from "../logic";
import type { EntityMeta, FieldMeta, FilterSpec, Me, Row, TableComp } from "../meta";
import { entityMeta } from "../store";
import { recordTitle } from "../titles";
import { BulkBar, exportCsv } from "./bulk";
import { FileCell, imagesOnly } from "./files";
import { ImportButton } from "./importer";
import { toast } from "./toasts";

export const SYSTEM_FIELDS: Record<string, FieldMeta> = {
  docstatus: {
    name: "docstatus", caption: "Status", help: null, type: "enum", required: false, read_only: true, immutable: false,
    masked: false, multiple: false, default: null,
    options: ["draft", "submitted", "cancelled"].map((v) => ({ value: v, label: v[0].toUpperCase() + v.slice(1) })),
  },
  created_at: { name: "created_at", caption: "Created", help: null, type: "datetime", required: false, read_only: true, immutable: false, masked: false, multiple: false, default: null },
  owner: { name: "owner", caption: "Owner", help: null, type: "string", required: false, read_only: true, immutable: false, masked: false, multiple: false, default: null },
};

export function fieldOf(meta: EntityMeta, name: string): FieldMeta | undefined {
  return meta.fields.find((f) => f.name === name) ?? SYSTEM_FIELDS[name];
}

export const today = () => new Date().toISOString().slice(0, 10);

function initialFilters(filters: FilterSpec[], meta: EntityMeta): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of filters) {
    if (f.type === "date_range") {
      out[`${f.field}.from`] = filterDefault(f, today());
      continue;
    }
    out[f.field] = filterDefault(f, today());
    if (!out[f.field] && f.show_all === false) out[f.field] = String(fieldOf(meta, f.field)?.options?.[0]?.value ?? "");
  }
  return out;
}

/** Display names of the related records a page of rows names, one list call per relation. */
export async function relationLabels(meta: EntityMeta, rows: Row[], names: string[]): Promise<Map<string, string>> {
  const labels = new Map<string, string>();
  await Promise.all(
    names.map(async (name) => {
      const f = fieldOf(meta, name);
      if (f?.type !== "relation" || !f.relation) return;
      const ids = [...new Set(rows.map((r) => r[name]).filter((v): v is string => typeof v === "string"))];
      if (!ids.length) return;
      const display = f.relation.display_field ?? "id";
      try {
        const answer = await get<Row[]>(`api/${f.relation.entity}?id[in]=${ids.join(",")}&fields=${display}&limit=${ids.length}`);
        for (const r of answer.data) labels.set(String(r.id), String(r[display] ?? r.id));
      } catch {
        /* a caller who may not read the related entity sees the ids */
      }
    }),
  );
  return labels;
}

type Props = {
  table: TableComp;
  me: Me;
  query: URLSearchParams;
  selected: string | null;
  onSelect: ((id: string) => void) | null;
  openHref: ((id: string) => string) | null;
  /** A dashboard's list: the rows only (no filters, column choice or paging). */
  compact?: boolean;
  /** List parameters the page fixes (a block's ``param``, its templates filled): always sent. */
  fixed?: Record<string, string>;
};

export function TableBlock(props: Props) {
  const meta = useLoad(() => entityMeta(props.table.entity), [props.table.entity]);
  if (meta.error) return html`<p class="error" role="alert">${meta.error.message}</p>`;
  if (!meta.value) return html`<p aria-busy="true">Loading…</p>`;
  return html`<${Rows} ...${props} meta=${meta.value} />`;
}

function Rows({ table, me, selected, onSelect, openHref, meta, compact, fixed }: Props & { meta: EntityMeta }) {
  const shown = visibleFields(meta.fields, me).filter((f) => f.type !== "child");
  const mayRead = (name: string) => !!SYSTEM_FIELDS[name] || shown.some((f) => f.name === name);
  const filters = (compact ? [] : table.filters.length ? table.filters : meta.filters.filter((f) => !f.from)).filter((f) => mayRead(f.field));
  const allColumns = (table.columns.length ? table.columns : shown.slice(0, 6).map((f): TableComp["columns"][number] => ({ field: f.name }))).filter((c) => mayRead(c.field));
  const [values, setValues] = useState(() => initialFilters(filters, meta));
  const [sort, setSort] = useState(table.sort);
  const [offset, setOffset] = useState(0);
  const [hidden, setHidden] = useState<Set<string>>(new Set());
  const columns = allColumns.filter((c) => !hidden.has(c.field));
  const limit = table.page_size || 50;
  const query = listQuery(filters, values, { fixed, sort, offset, limit, fields: [...new Set([...allColumns.map((c) => c.field), ...(meta.title_field && mayRead(meta.title_field) ? [meta.title_field] : [])])].filter((f) => !SYSTEM_FIELDS[f] || f === "docstatus") });
  const page = useLoad(async () => {
    const answer = await get<Row[]>(`${meta.api}?${query}`);
    const labels = await relationLabels(meta, answer.data, allColumns.map((c) => c.field));
    return { rows: answer.data, total: answer.total ?? answer.data.length, labels };
  }, [query]);
  useLive(meta.name, null, page.reload); // another client's change shows without a reload
  const [picked, setPicked] = useState<string[]>([]);
  const [exporting, setExporting] = useState(false);
  const selectable = !compact;
  const pageIds = page.value?.rows.map((r) => String(r.id)) ?? [];
  const allPicked = pageIds.length > 0 && pageIds.every((i) => picked.includes(i));
  const toggle = (rid: string) => setPicked((p) => (p.includes(rid) ? p.filter((x) => x !== rid) : [...p, rid]));
  const download = async () => {
    setExporting(true);
    try {
      const n = await exportCsv(meta, query);
      toast(`Exported ${n} row(s) to CSV.`, "ok", false);
    } catch (e) {
      toast(`Export failed: ${(e as Error).message}`, "error", false);
    } finally {
      setExporting(false);
    }
  };
  const setFilter = (key: string, value: string) => {
    setValues((v) => ({ ...v, [key]: value }));
    setOffset(0);
  };
  const title = table.title ?? meta.title;
  const id = `t-${table.entity.replace("/", "-")}`;
  return html`<div class="table-block">
    <div class="table-head">
      ${compact ? html`<h3 id=${`${id}-title`}>${title}</h3>` : html`<h2 id=${`${id}-title`}>${title}</h2>`}
      ${!compact && html`<span class="head-tools">
        <button type="button" onClick=${download} disabled=${exporting}>Export CSV</button>
        ${canEdit(meta, null, me) && html`<${ImportButton} meta=${meta} onDone=${page.reload} />`}
        ${openHref && canEdit(meta, null, me) && html`<a class="button primary" href=${openHref("new")}>New ${meta.title.toLowerCase()}</a>`}
      </span>`}
    </div>
    ${selectable && picked.length > 0 && html`<${BulkBar} meta=${meta} me=${me} ids=${picked} onDone=${(failed: string[]) => { setPicked(failed); page.reload(); }} />`}
    ${filters.length > 0 && html`<form class="filters" role="search" aria-label=${`Filter ${title}`} onSubmit=${(e: Event) => e.preventDefault()}>
      ${filters.map((f) => html`<${FilterInput} spec=${f} field=${fieldOf(meta, f.field)} values=${values} set=${setFilter} id=${id} />`)}
    </form>`}
    ${!compact && html`<details class="columns">
      <summary>Columns</summary>
      <fieldset><legend class="sr-only">Shown columns</legend>
        ${allColumns.map((c) => html`<label><input type="checkbox" checked=${!hidden.has(c.field)}
          onChange=${() => setHidden((h) => { const n = new Set(h); if (n.has(c.field)) n.delete(c.field); else n.add(c.field); return n; })} />
          ${c.label ?? fieldOf(meta, c.field)?.caption ?? c.field}</label>`)}
      </fieldset>
    </details>`}
    ${page.error && html`<p class="error" role="alert">${page.error.message}</p>`}
    <div class="scroll" tabindex="0" role="group" aria-label=${`${title} rows`}>
    <table aria-labelledby=${`${id}-title`} aria-busy=${page.loading}>
      <thead><tr>
        ${selectable && html`<th scope="col" class="pick"><input type="checkbox" aria-label="Select all rows on this page" checked=${allPicked}
          onChange=${() => setPicked((p) => (allPicked ? p.filter((x) => !pageIds.includes(x)) : [...new Set([...p, ...pageIds])]))} /></th>`}
        ${columns.map((c) => {
          const label = c.label ?? fieldOf(meta, c.field)?.caption ?? c.field;
          const state = sort === c.field ? "ascending" : sort === `-${c.field}` ? "descending" : undefined;
          return html`<th scope="col" aria-sort=${state}>${c.sortable === false ? label
            : html`<button class="sort" onClick=${() => { setSort(nextSort(sort, c.field, table.sort)); setOffset(0); }}>${label}<span aria-hidden="true">${state === "ascending" ? " ▲" : state === "descending" ? " ▼" : ""}</span></button>`}</th>`;
        })}
      </tr></thead>
      <tbody>
        ${page.value?.rows.map((row, n) => {
          const rid = String(row.id);
          return html`<tr class=${selected === rid ? "selected" : ""} aria-selected=${onSelect ? selected === rid : undefined}
            onClick=${onSelect ? () => onSelect(rid) : undefined}>
            ${selectable && html`<td class="pick"><input type="checkbox" aria-label=${`Select row ${n + 1}`} title=${`Select ${recordTitle(meta, row)}`} checked=${picked.includes(rid)}
              onClick=${(e: Event) => e.stopPropagation()} onChange=${() => toggle(rid)} /></td>`}
            ${columns.map((c, i) => {
              const field = fieldOf(meta, c.field);
              const text = formatValue(field, row[c.field], page.value?.labels);
              const caption = c.label ?? field?.caption ?? c.field;
              if (i > 0 && field?.type === "file" && row[c.field] && meta.api) {
                return html`<td data-label=${caption}><${FileCell} path=${`${meta.api}/${rid}/_files/${field.name}`} label=${caption}
                  title=${recordTitle(meta, row)} image=${imagesOnly(field)} /></td>`;
              }
              if (i > 0) return html`<td data-label=${caption}>${text}</td>`;
              const shown = text || rid.slice(0, 8);
              if (onSelect) return html`<td><button class="link" aria-pressed=${selected === rid} onClick=${(e: Event) => { e.stopPropagation(); onSelect(rid); }}>${shown}</button></td>`;
              if (openHref) return html`<td><a href=${openHref(rid)}>${shown}</a></td>`;
              return html`<td>${shown}</td>`;
            })}
          </tr>`;
        })}
        ${page.value && page.value.rows.length === 0 && html`<tr><td colspan=${columns.length + (selectable ? 1 : 0)} class="muted">Nothing here yet.</td></tr>`}
      </tbody>
    </table>
    </div>
    ${page.value && !compact && html`<nav class="pager" aria-label=${`Paging of ${title}`}>
      <button disabled=${offset === 0} onClick=${() => setOffset(Math.max(0, offset - limit))}>Previous</button>
      <span aria-live="polite">${page.value.total === 0 ? "0" : `${offset + 1}–${offset + page.value.rows.length}`} of ${page.value.total}</span>
      <button disabled=${offset + limit >= page.value.total} onClick=${() => setOffset(offset + limit)}>Next</button>
    </nav>`}
  </div>`;
}

function FilterInput({ spec, field, values, set, id }: { spec: FilterSpec; field: FieldMeta | undefined; values: Record<string, string>; set: (k: string, v: string) => void; id: string }) {
  const label = spec.label ?? field?.caption ?? spec.field;
  const fid = `${id}-f-${spec.field}`;
  const type = spec.type ?? (field?.options ? "select" : field?.type === "date" ? "date" : "text");
  if (type === "select") {
    const options = field?.options ?? [];
    return html`<div class="field"><label for=${fid}>${label}</label>
      <select id=${fid} value=${values[spec.field] ?? ""} onChange=${(e: Event) => set(spec.field, (e.target as HTMLSelectElement).value)}>
        ${spec.show_all !== false && html`<option value="">${spec.all_label ?? "(ALL)"}</option>`}
        ${options.map((o) => html`<option value=${String(o.value)}>${o.label}</option>`)}
      </select></div>`;
  }
  if (type === "date_range")
    return html`<fieldset class="range"><legend>${label}</legend>
      <label for=${`${fid}-from`}>From</label><input id=${`${fid}-from`} type="date" value=${values[`${spec.field}.from`] ?? ""} onChange=${(e: Event) => set(`${spec.field}.from`, (e.target as HTMLInputElement).value)} />
      <label for=${`${fid}-to`}>To</label><input id=${`${fid}-to`} type="date" value=${values[`${spec.field}.to`] ?? ""} onChange=${(e: Event) => set(`${spec.field}.to`, (e.target as HTMLInputElement).value)} />
    </fieldset>`;
  return html`<div class="field"><label for=${fid}>${label}</label>
    <input id=${fid} type=${type === "date" ? "date" : "search"} value=${values[spec.field] ?? ""}
      onInput=${type === "date" ? undefined : (e: Event) => set(spec.field, (e.target as HTMLInputElement).value)}
      onChange=${(e: Event) => set(spec.field, (e.target as HTMLInputElement).value)} /></div>`;
}

