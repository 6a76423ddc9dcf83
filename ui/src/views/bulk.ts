// A list's selection and what can be done with it: the actions every selected record allows (the
// same buttons its form would show: transitions, custom actions, delete), run one record at a time
// through the API with a per-record report; and the CSV export of the list's current filter,
// read page by page from the list API (so permissions, hidden fields and row scope are the API's).
import { useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { toCsv } from "../csv";
import { useLoad } from "../hooks";
import { html } from "../html";
import { type Button, buttonsFor } from "../logic";
import type { EntityMeta, Me, Row } from "../meta";
import { recordTitle } from "../titles";
import { Confirm } from "./dialog";
import { toast } from "./toasts";

const PAGE = 1000; // the list API's largest page
const MAX_ROWS = 100_000;

/** Every row of ``query`` (a list query string; its limit and offset are replaced). */
export async function allRows(meta: EntityMeta, query: string): Promise<Row[]> {
  const q = new URLSearchParams(query);
  q.delete("fields");
  q.set("count", "true");
  const rows: Row[] = [];
  for (let offset = 0; offset < MAX_ROWS; offset += PAGE) {
    q.set("limit", String(PAGE));
    q.set("offset", String(offset));
    const answer = await get<Row[]>(`${meta.api}?${q}`);
    rows.push(...answer.data);
    if (answer.data.length < PAGE || rows.length >= (answer.total ?? 0)) break;
  }
  return rows;
}

// id names the record when the file is imported back, version and docstatus say what it was when
// exported (a row written over a record that moved on since is refused); masked fields are left
// out (the mask is not the value, and importing it back would overwrite the value).
export function exportColumns(meta: EntityMeta, rows: Row[]): string[] {
  const seen = new Set<string>(["id"]);
  for (const f of meta.fields) if (f.type !== "child" && !f.masked && rows.some((r) => f.name in r)) seen.add(f.name);
  for (const extra of ["docstatus", "version"]) if (rows.some((r) => extra in r)) seen.add(extra);
  return [...seen];
}

export async function exportCsv(meta: EntityMeta, query: string): Promise<number> {
  const rows = await allRows(meta, query);
  const json = new Set(meta.fields.filter((f) => f.multiple || f.type === "json" || f.type === "attachment").map((f) => f.name));
  const blob = new Blob([toCsv(exportColumns(meta, rows), rows, json)], { type: "text/csv;charset=utf-8" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `${meta.name.replace("/", "-")}-${new Date().toISOString().slice(0, 10)}.csv`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  return rows.length;
}

type Outcome = { title: string; error: string | null };

export function BulkBar({ meta, me, ids, onDone }: { meta: EntityMeta; me: Me; ids: string[]; onDone: (failedIds: string[]) => void }) {
  const records = useLoad(async () => (await get<Row[]>(`${meta.api}?id[in]=${ids.join(",")}&limit=${ids.length}`)).data, [ids.join(",")]);
  const [asking, setAsking] = useState<Button | null>(null);
  const [busy, setBusy] = useState(false);
  const [failed, setFailed] = useState<Outcome[]>([]);
  const rows = records.value ?? [];
  // the buttons every selected record's form would show
  const common = rows.length
    ? rows.map((r) => buttonsFor(meta, r, me)).reduce((acc, bs) => acc.filter((b) => bs.some((x) => x.action === b.action)))
    : [];
  const run = async (b: Button) => {
    setBusy(true);
    const outcomes: (Outcome & { id: string })[] = [];
    for (const r of rows) {
      try {
        if (b.kind === "delete") await call("DELETE", `${meta.api}/${r.id}`);
        else await call("POST", `${meta.api}/${r.id}/${b.action}`, b.kind === "custom" ? {} : undefined, { "If-Match": `"${r.version}"` });
        outcomes.push({ id: String(r.id), title: recordTitle(meta, r), error: null });
      } catch (e) {
        outcomes.push({ id: String(r.id), title: recordTitle(meta, r), error: e instanceof Problem ? e.detail : String(e) });
      }
    }
    setBusy(false);
    const bad = outcomes.filter((o) => o.error);
    setFailed(bad);
    toast(`${b.label}: ${outcomes.length - bad.length} of ${outcomes.length} done.`, bad.length ? "error" : "ok", false);
    onDone(bad.map((o) => o.id)); // the records it failed for stay selected, with the reasons
  };
  return html`<div class="bulk" role="group" aria-label="Selected rows">
    <span>${ids.length} selected</span>
    ${common.map((b) => html`<button type="button" class=${b.style} disabled=${busy} onClick=${() => setAsking(b)}>${b.label}</button>`)}
    ${records.value && common.length === 0 && html`<span class="muted">No action applies to all of them.</span>`}
    ${failed.length > 0 && html`<div class="error" role="alert"><p>Not done for:</p><ul>${failed.map((f) => html`<li>${f.title}: ${f.error}</li>`)}</ul></div>`}
    ${asking && html`<${Confirm} text=${`${asking.label}: ${ids.length} record(s)?`} onAnswer=${(ok: boolean) => { const b = asking; setAsking(null); if (ok) void run(b); }} />`}
  </div>`;
}
