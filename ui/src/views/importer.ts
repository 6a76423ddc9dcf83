// CSV import into a list's entity: choose a file, see how its columns map onto the entity's fields
// and what the import would do (a dry run of the server's import: counts, or every problem with
// its line and field), then import. The server runs it as the caller, all or nothing.
import { useEffect, useRef, useState } from "preact/hooks";
import { session, workspace } from "../api";
import { csvHeader } from "../csv";
import { html } from "../html";
import type { EntityMeta } from "../meta";
import { toast } from "./toasts";

const EXPORTED = new Set(["id", "version", "docstatus"]); // the export's own columns, read back by the import

type Outcome = { status: number; body: { created?: number; updated?: number; unchanged?: number; rows?: number; detail?: string; problems?: { line: number; field: string | null; message: string }[]; errors?: { path: string; message: string }[] } };

async function send(meta: EntityMeta, text: string, dry: boolean): Promise<Outcome> {
  const response = await fetch(`/${workspace}/${meta.api}/_import${dry ? "?dry_run=true" : ""}`, {
    method: "POST",
    body: text,
    headers: { "Content-Type": "text/csv", Authorization: `Bearer ${session.token ?? ""}` },
  });
  return { status: response.status, body: (await response.json().catch(() => ({}))) as Outcome["body"] };
}

export function ImportButton({ meta, onDone }: { meta: EntityMeta; onDone: () => void }) {
  const [file, setFile] = useState<{ name: string; text: string } | null>(null);
  const input = useRef<HTMLInputElement>(null);
  return html`<label class="button">Import CSV<input ref=${input} type="file" class="sr-only" accept=".csv,text/csv"
      onChange=${async (e: Event) => { const f = (e.target as HTMLInputElement).files?.[0]; if (f) setFile({ name: f.name, text: await f.text() }); }} /></label>
    ${file && html`<${ImportDialog} meta=${meta} file=${file} onClose=${(imported: boolean) => { setFile(null); if (input.current) input.current.value = ""; if (imported) onDone(); }} />`}`;
}

function ImportDialog({ meta, file, onClose }: { meta: EntityMeta; file: { name: string; text: string }; onClose: (imported: boolean) => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [preview, setPreview] = useState<Outcome | null>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    ref.current?.showModal();
    void send(meta, file.text, true).then(setPreview);
  }, []);
  const header = csvHeader(file.text);
  const caption = (c: string) => meta.fields.find((f) => f.name === c)?.caption ?? (c.startsWith("_") || EXPORTED.has(c) ? c : null);
  const problems = preview?.body.problems ?? preview?.body.errors?.map((e) => ({ line: 1, field: e.path, message: e.message })) ?? [];
  const ok = preview?.status === 200;
  const run = async () => {
    setBusy(true);
    const done = await send(meta, file.text, false);
    setBusy(false);
    if (done.status === 200) {
      toast(`Imported ${file.name}: ${done.body.created ?? 0} created, ${done.body.updated ?? 0} updated.`, "ok", false);
      onClose(true);
    } else setPreview(done);
  };
  return html`<dialog ref=${ref} class="import" aria-labelledby="import-title" onCancel=${() => onClose(false)}>
    <h2 id="import-title">Import ${file.name} into ${meta.title}</h2>
    <table aria-label="Column mapping"><thead><tr><th scope="col">Column</th><th scope="col">Field</th></tr></thead>
      <tbody>${header.map((c) => html`<tr><td>${c}</td><td>${caption(c) ?? html`<span class="error">not a field</span>`}</td></tr>`)}</tbody></table>
    ${!preview && html`<p aria-busy="true">Checking every row…</p>`}
    ${ok && html`<p>${preview.body.rows} row(s): ${preview.body.created} to create, ${preview.body.updated} to update, ${preview.body.unchanged} unchanged.</p>`}
    ${preview && !ok && html`<div class="error" role="alert"><p>${preview.body.detail ?? `HTTP ${preview.status}`}</p>
      <ul>${problems.map((p) => html`<li>Line ${p.line}${p.field ? `, ${p.field}` : ""}: ${p.message}</li>`)}</ul></div>`}
    <div class="buttons">
      <button class="primary" disabled=${!ok || busy} onClick=${run}>Import</button>
      <button onClick=${() => onClose(false)}>Cancel</button>
    </div>
  </dialog>`;
}
