// A ``file`` field over the API's ``…/{id}/_files/{field}``: the stored file's name, a preview when
// it is an image, Download, and Upload / Replace / Remove on a record the caller may edit. Upload
// is a PUT of the bytes at the record's version (``If-Match``), like a PATCH of the one field;
// Remove is a PATCH of the field to null. A new record takes its files once it is created. Either
// at an old version is the form's to tell (``conflicted``: the notice with Reload that Save gives).
import { useEffect, useState } from "preact/hooks";
import { Problem, call, isStale, session, workspace } from "../api";
import { html } from "../html";
import type { FieldMeta } from "../meta";
import { toast } from "./toasts";

export type FileContext = { api: string; id: string; version: unknown; reload: () => void; conflicted: () => void } | null;

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
  // the field's own failures (a type it does not accept, a file too large) are shown on it
  const write = async (work: (c: NonNullable<FileContext>) => Promise<unknown>, done: string) => {
    if (!ctx) return;
    setBusy(true);
    setProblem(null);
    try {
      await work(ctx);
      toast(done, "ok", false);
      ctx.reload();
    } catch (e) {
      if (isStale(e)) ctx.conflicted();
      else setProblem((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const upload = (chosen: File) => write((c) => call("PUT", `${c.api}/${c.id}/_files/${field.name}`, chosen, {
    "Content-Type": chosen.type || "application/octet-stream",
    "X-File-Name": /^[\x20-\x7e]*$/.test(chosen.name) ? chosen.name : encodeURIComponent(chosen.name),
    "If-Match": `"${String(c.version)}"`,
  }), `${label}: ${chosen.name} uploaded.`);
  // the chooser is emptied once read: the same file chosen again (after a Reload) is a new choice
  const choose = (e: Event) => {
    const input = e.target as HTMLInputElement;
    const chosen = input.files?.[0];
    input.value = "";
    if (chosen) void upload(chosen);
  };
  const remove = () => write((c) => call("PATCH", `${c.api}/${c.id}`, { [field.name]: null }, { "If-Match": `"${String(c.version)}"` }), `${label}: removed.`);
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
          onChange=${choose} /></label>
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
