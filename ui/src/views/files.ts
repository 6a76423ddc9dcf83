// A ``file`` field over the API's ``…/{id}/_files/{field}``: the stored file's name, a preview when
// it is an image, Download, and Upload / Replace / Remove on a record the caller may edit. Upload
// is a PUT of the bytes at the record's version (``If-Match``), like a PATCH of the one field;
// Remove is a PATCH of the field to null. A new record takes its files once it is created.
import { useEffect, useState } from "preact/hooks";
import { Problem, call, session, workspace } from "../api";
import { html } from "../html";
import type { FieldMeta } from "../meta";
import { toast } from "./toasts";

export type FileContext = { api: string; id: string; version: unknown; reload: () => void } | null;

type Loaded = { url: string; name: string; type: string; size: number };

function fileName(disposition: string | null): string {
  const star = /filename\*=UTF-8''([^;]+)/i.exec(disposition ?? "");
  if (star) return decodeURIComponent(star[1]);
  return /filename="?([^";]+)"?/i.exec(disposition ?? "")?.[1] ?? "file";
}

async function fetchFile(path: string): Promise<Loaded | null> {
  const response = await fetch(`/${workspace}/${path}`, { headers: session.token ? { Authorization: `Bearer ${session.token}` } : {} });
  if (response.status === 404) return null;
  if (!response.ok) throw new Problem(response.status, "", `the file could not be read (HTTP ${response.status})`);
  const blob = await response.blob();
  return { url: URL.createObjectURL(blob), name: fileName(response.headers.get("Content-Disposition")), type: blob.type, size: blob.size };
}

export function FileField({ field, id, label, value, editable, ctx }: { field: FieldMeta; id: string; label: string; value: unknown; editable: boolean; ctx: FileContext }) {
  const [file, setFile] = useState<Loaded | null>(null);
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const path = ctx ? `${ctx.api}/${ctx.id}/_files/${field.name}` : null;
  useEffect(() => {
    let live = true;
    let url: string | null = null;
    setFile(null);
    if (path && value) fetchFile(path).then((f) => { url = f?.url ?? null; if (live) setFile(f); }, (e: Error) => live && setProblem(e.message));
    return () => { live = false; if (url) URL.revokeObjectURL(url); };
  }, [path, value]);
  const upload = async (chosen: File) => {
    if (!ctx || !path) return;
    setBusy(true);
    setProblem(null);
    try {
      const response = await fetch(`/${workspace}/${path}`, {
        method: "PUT",
        body: chosen,
        headers: {
          Authorization: `Bearer ${session.token ?? ""}`,
          "Content-Type": chosen.type || "application/octet-stream",
          "X-File-Name": /^[\x20-\x7e]*$/.test(chosen.name) ? chosen.name : encodeURIComponent(chosen.name),
          "If-Match": `"${String(ctx.version)}"`,
        },
      });
      if (!response.ok) {
        const body = (await response.json().catch(() => ({}))) as { detail?: string };
        throw new Error(body.detail ?? `HTTP ${response.status}`);
      }
      toast(`${label}: ${chosen.name} uploaded.`, "ok", false);
      ctx.reload();
    } catch (e) {
      setProblem((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const remove = async () => {
    if (!ctx) return;
    setBusy(true);
    try {
      await call("PATCH", `${ctx.api}/${ctx.id}`, { [field.name]: null }, { "If-Match": `"${String(ctx.version)}"` });
      toast(`${label}: removed.`, "ok", false);
      ctx.reload();
    } catch (e) {
      setProblem((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const image = file?.type.startsWith("image/");
  return html`<fieldset class="field file" id=${id}>
    <legend>${label}</legend>
    ${!value && html`<p class="muted">No file.</p>`}
    ${file && html`<p><span class="file-name">${file.name}</span> <span class="muted">(${Math.ceil(file.size / 1024)} KiB)</span></p>
      ${image && html`<img class="preview" src=${file.url} alt=${`${label}: ${file.name}`} />`}
      <a class="button" href=${file.url} download=${file.name}>Download ${label}</a>`}
    ${editable && !ctx && html`<p class="muted">Create the record first, then attach a file.</p>`}
    ${editable && ctx && html`<div class="file-tools">
      <label class="button">${value ? `Replace ${label}` : `Upload ${label}`}
        <input type="file" class="sr-only" accept=${field.accept?.join(",")} disabled=${busy}
          onChange=${(e: Event) => { const f = (e.target as HTMLInputElement).files?.[0]; if (f) void upload(f); }} /></label>
      ${value && html`<button type="button" class="danger" disabled=${busy} onClick=${remove}>Remove ${label}</button>`}
    </div>`}
    ${problem && html`<p class="error" role="alert">${problem}</p>`}
  </fieldset>`;
}

/** Whether every type a field accepts is an image, so its list cell previews instead of downloading. */
export function imagesOnly(field: FieldMeta): boolean {
  return !!field.accept?.length && field.accept.every((t) => t.startsWith("image/"));
}

// A file field in a list row. Nothing is fetched until asked: a row of fifty files must not load
// fifty files. An image field's button puts a thumbnail in the cell; any other file is downloaded
// under its stored name.
export function FileCell({ path, label, title, image }: { path: string; label: string; title: string; image: boolean }) {
  const [file, setFile] = useState<Loaded | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  useEffect(() => () => { if (file) URL.revokeObjectURL(file.url); }, [file]);
  const open = async (e: Event) => {
    e.stopPropagation();
    setProblem(null);
    try {
      const found = await fetchFile(path);
      if (!found) return setProblem("No file.");
      if (found.type.startsWith("image/")) return setFile(found);
      const link = document.createElement("a");
      link.href = found.url;
      link.download = found.name;
      link.click();
      setTimeout(() => URL.revokeObjectURL(found.url), 10_000);
    } catch (err) {
      setProblem((err as Error).message);
    }
  };
  if (file) {
    return html`<a href=${file.url} download=${file.name} onClick=${(e: Event) => e.stopPropagation()}>
      <img class="thumb" src=${file.url} alt=${`${label} of ${title}: ${file.name}`} /></a>`;
  }
  const verb = image ? "Preview" : "Download";
  return html`<button type="button" class="link" aria-label=${`${verb} ${label} of ${title}`} onClick=${open}>${verb}</button>${problem && html` <span class="error" role="alert">${problem}</span>`}`;
}
