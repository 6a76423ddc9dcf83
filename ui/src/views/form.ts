// A Form manifest over one record: fields from metadata with live visible/readonly/required rules
// and computed values, server problems on their fields, Save, the actions the API allows (with
// their confirm texts), and the record's audit trail.
import { useEffect, useState } from "preact/hooks";
import { Problem, call, get, isStale, session } from "../api";
import { useLive, useLoad } from "../hooks";
import { html } from "../html";
import {
  type Button, buttonsFor, canEdit, computeLive, contextOf, fieldState, formatValue, initialValue,
  interpolate, payloadOf, problemsByPath, visibleFields,
} from "../logic";
import type { AppDetail, Approval, EntityMeta, FieldMeta, FormComp, Me, Period, Row } from "../meta";
import { closedPeriodOf, readOnlyReason } from "../periods";
import { entityMeta } from "../store";
import { recordTitle, stateLabel } from "../titles";
import { ApprovalPanel, gatedActions, recordApprovals } from "./approvals";
import { Confirm } from "./dialog";
import { FieldInput } from "./fields";
import { FileField } from "./files";
import { RelatedLists } from "./related";
import { toast } from "./toasts";
import { SYSTEM_FIELDS, relationLabels } from "./table";

type Props = {
  form: FormComp;
  app: AppDetail;
  me: Me;
  id: string | null;
  mode: "view" | "edit";
  setCrumb: ((c: string | null) => void) | null;
  onCreated: (id: string) => void;
  onDeleted: () => void;
  editHref: string | null;
};

type Audit = { id: number; action: string; at: string; actor: { username?: string; sub?: string }; changes: Record<string, unknown> };

/** One change of an audit row: ``[before, after]`` of a field, or a detail object (an approval's). */
function describe(change: unknown): string {
  if (Array.isArray(change) && change.length === 2) return `${JSON.stringify(change[0])} → ${JSON.stringify(change[1])}`;
  if (change && typeof change === "object")
    return Object.entries(change)
      .filter(([k, v]) => v !== null && k !== "id")
      .map(([k, v]) => `${k} ${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(", ");
  return JSON.stringify(change);
}

export function FormBlock(props: Props) {
  const loaded = useLoad(async () => {
    const meta = await entityMeta(props.form.entity);
    const record = props.id ? (await get<Row>(`${meta.api}/${props.id}`)).data : null;
    // the record's approvals come with it: its gated buttons depend on them (409 while pending)
    const approvals = record && gatedActions(meta).size > 0 ? await recordApprovals(meta, String(record.id)) : NO_APPROVALS;
    // a record dated in a closed period is read-only: the server refuses every write of it
    const closed = record && meta.period_field ? closedPeriodOf(await listPeriods(), record[meta.period_field]) : null;
    return { meta, record, approvals, closed };
  }, [props.form.entity, props.id]);
  if (loaded.error) return html`<p class="error" role="alert">${loaded.error.message}</p>`;
  if (!loaded.value) return html`<p aria-busy="true">Loading…</p>`;
  return html`<${Editor} ...${props} meta=${loaded.value.meta} record=${loaded.value.record} approvals=${loaded.value.approvals} closed=${loaded.value.closed} reload=${loaded.reload} />`;
}

const listPeriods = () => get<Period[]>("api/_periods").then((a) => a.data);

function formFields(form: FormComp, meta: EntityMeta, me: Me): { field: FieldMeta; label: string; help: string | null; readonly: boolean; hidden: boolean; default_from?: string }[] {
  const entries = form.fields.length ? form.fields : meta.fields.map((f) => ({ field: f.name }));
  const allowed = visibleFields(meta.fields, me);
  return entries.flatMap((entry) => {
    const field = allowed.find((f) => f.name === entry.field);
    if (!field) return [];
    const e = entry as FormComp["fields"][number];
    return [{ field, label: e.label ?? field.caption ?? field.name, help: e.help ?? field.help, readonly: !!e.readonly, hidden: !!e.hidden, default_from: e.default_from }];
  });
}

const NO_APPROVALS = { list: [] as Approval[], mine: new Set<string>() };

type EditorProps = Props & { meta: EntityMeta; record: Row | null; approvals: typeof NO_APPROVALS; closed: Period | null; reload: () => void };

function Editor({ form, app, me, id, mode, setCrumb, onCreated, onDeleted, editHref, meta, record, approvals, closed, reload }: EditorProps) {
  const fields = formFields(form, meta, me);
  const creating = record === null;
  const [values, setValues] = useState<Row>(() => record ?? Object.fromEntries(fields.map((f) => [f.field.name, initialValue(f.field, f.default_from, { username: session.username ?? "" })])));
  const [problem, setProblem] = useState<Problem | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [asking, setAsking] = useState<{ text: string; run: () => void } | null>(null);
  const [busy, setBusy] = useState(false);
  const [stale, setStale] = useState(false);
  const editable = mode === "edit" && !closed && canEdit(meta, record, me);
  const live = computeLive(meta.fields, values);
  const context = contextOf(meta.fields, live);
  const errors = problemsByPath(problem?.errors ?? []);
  const title = record ? recordTitle(meta, record) : `New ${meta.title.toLowerCase()}`;
  useEffect(() => {
    if (!setCrumb) return;
    setCrumb(title);
    document.title = `${title} · ${meta.title} · ${app.title}`; // the tab names the record
  }, [title]);
  // a record the caller has not edited follows other clients' changes; an edited one says so
  useEffect(() => {
    if (record) setValues(record);
  }, [record?.version]);
  useLive(record ? meta.name : null, record ? String(record.id) : null, (e) => {
    if (typeof e.version === "number" && e.version <= Number(record?.version)) return;
    if (values === record || !editable) reload();
    else setStale(true);
  });
  const gated = gatedActions(meta);
  const pending = approvals.list.some((a) => a.status === "pending");
  const labels = useLoad(() => (record ? relationLabels(meta, [record], fields.map((f) => f.field.name)) : Promise.resolve(new Map<string, string>())), [record]);

  const ask = (text: string | null | undefined, run: () => void) => (text ? setAsking({ text: interpolate(text, live), run }) : run());
  // a write at an old version: someone else saved in between; say so and offer Reload (the file
  // fields write on their own and come here too)
  const conflicted = () => {
    setNotice(null);
    setStale(true);
    toast("Not saved: someone else changed this record.", "error");
  };
  const act = async (work: () => Promise<void>, done: string) => {
    setBusy(true);
    setProblem(null);
    setNotice(null);
    try {
      await work();
      setNotice(done);
      toast(done);
    } catch (e) {
      if (isStale(e)) return conflicted();
      setProblem(e instanceof Problem ? e : new Problem(0, "", String(e)));
      toast(`Failed: ${e instanceof Error ? e.message : String(e)}`, "error");
    } finally {
      setBusy(false);
    }
  };
  const save = () => act(async () => {
    const body = payloadOf(visibleFields(meta.fields, me), values, { creating, original: record ?? undefined });
    if (creating) {
      const answer = await call<Row>("POST", meta.api ?? "", body);
      onCreated(String(answer.data.id));
    } else {
      await call<Row>("PATCH", `${meta.api}/${record.id}`, body, { "If-Match": `"${record.version}"` });
      reload();
    }
  }, creating ? "Created." : "Saved.");
  const confirmFor = (kind: "create" | "update" | "delete") => form.confirm?.[kind] ?? app.confirm?.[kind] ?? null;
  const run = (b: Button) => {
    if (!record) return;
    if (b.kind === "delete")
      return ask(b.confirm ?? confirmFor("delete"), () => act(async () => {
        await call("DELETE", `${meta.api}/${record.id}`);
        toast(`Deleted ${title}.`, "ok", false); // the form goes away: the toast says it
        onDeleted();
      }, "Deleted."));
    ask(b.confirm, async () => {
      let sent = false;
      await act(async () => {
        const answer = await call<Row>("POST", `${meta.api}/${record.id}/${b.action}`, b.kind === "custom" ? {} : undefined, { "If-Match": `"${record.version}"` });
        sent = answer.status === 202; // a gated transition: an approval opened, the record unchanged
        reload();
      }, `${b.label}: done.`);
      if (sent) setNotice("Sent for approval.");
    });
  };
  // while an approval of the record is pending, its gated transitions answer 409: not offered
  const buttons = record && !closed ? buttonsFor(meta, record, me, form).filter((b) => !(pending && gated.has(b.action))) : [];
  const formId = `form-${meta.name.replace("/", "-")}`;
  const unplaced = problem ? problem.errors.filter((e) => !fields.some((f) => e.path === f.field.name || e.path.startsWith(`${f.field.name}[`))) : [];
  return html`<div class="form-block">
    <div class="table-head">
      <h2 id=${`${formId}--heading`}>${form.title ?? meta.title}: ${title}</h2>
      ${record && html`<span class="badges">
        ${meta.lifecycle && html`<span class=${`badge ${record.docstatus}`}>${formatValue(SYSTEM_FIELDS.docstatus, record.docstatus)}</span>`}
        ${meta.state_machine && html`<span class="badge">${stateLabel(record[meta.state_machine.field])}</span>`}
      </span>`}
    </div>
    ${closed && html`<p class="closed-period" role="note">${readOnlyReason(closed)}</p>`}
    <div role="status" aria-live="polite" class="notice">${notice}
      ${stale && html` Someone else changed this record since you opened it. Reload to see their version (your unsaved changes here are dropped). <button type="button" onClick=${() => { setStale(false); setProblem(null); setNotice(null); reload(); }}>Reload</button>`}</div>
    ${problem && html`<div class="error" role="alert"><p>${problem.detail}</p>
      ${unplaced.length > 0 && html`<ul>${unplaced.map((e) => html`<li>${e.path}: ${e.message}</li>`)}</ul>`}</div>`}
    <form id=${formId} aria-labelledby=${`${formId}--heading`} novalidate onSubmit=${(e: Event) => { e.preventDefault(); if (editable) ask(confirmFor(creating ? "create" : "update"), save); }}>
      ${fields.map((f) => {
        const state = fieldState(f.field, context, { creating, editable, formReadonly: f.readonly, hidden: f.hidden });
        if (!state.visible) return null;
        if (f.field.type === "file") {
          const ctx = record && meta.api ? { api: meta.api, id: String(record.id), version: record.version, reload, conflicted } : null;
          return html`<${FileField} field=${f.field} id=${`${formId}-${f.field.name}`} label=${f.label} value=${record?.[f.field.name] ?? null}
            editable=${mode === "edit" && editable && !state.readonly} ctx=${ctx} />`;
        }
        if (mode === "view" || !editable) {
          if (f.field.type === "child") return html`<${FieldInput} field=${f.field} id=${`${formId}-${f.field.name}`} label=${f.label} value=${live[f.field.name]} state=${{ ...state, readonly: true }} errors=${errors} path=${f.field.name} onChange=${() => undefined} />`;
          return html`<div class="field readonly"><span class="label" id=${`${formId}-${f.field.name}-l`}>${f.label}</span>
            <span class="value" aria-labelledby=${`${formId}-${f.field.name}-l`} data-field=${f.field.name}>${formatValue(f.field, live[f.field.name], labels.value ?? undefined) || "—"}</span></div>`;
        }
        return html`<${FieldInput} field=${f.field} id=${`${formId}-${f.field.name}`} label=${f.label} help=${f.help}
          value=${live[f.field.name] ?? null} state=${state} error=${errors.get(f.field.name)} errors=${errors} path=${f.field.name}
          onChange=${(v: unknown) => setValues((old) => ({ ...old, [f.field.name]: v }))} />`;
      })}
      <div class="buttons">
        ${editable && html`<button class="primary" type="submit" disabled=${busy}>${creating ? "Create" : "Save"}</button>`}
        ${buttons.map((b) => html`<button type="button" class=${b.style} disabled=${busy} onClick=${() => run(b)}>${b.label}</button>`)}
        ${editHref && html`<a class="button" href=${editHref}>Open</a>`}
      </div>
    </form>
    ${record && html`<${ApprovalPanel} meta=${meta} approvals=${approvals} label=${title}
      onDecided=${(text: string) => { setNotice(text); reload(); }} />`}
    ${record && mode === "edit" && html`<${RelatedLists} app=${app} meta=${meta} id=${String(record.id)} />`}
    ${record && mode === "edit" && meta.rest.includes("find") && html`<${Trail} meta=${meta} id=${String(record.id)} version=${record.version} />`}
    ${asking && html`<${Confirm} text=${asking.text} onAnswer=${(ok: boolean) => { const a = asking; setAsking(null); if (ok) a.run(); }} />`}
  </div>`;
}

function Trail({ meta, id, version }: { meta: EntityMeta; id: string; version: unknown }) {
  const rows = useLoad(() => get<Audit[]>(`${meta.api}/${id}/_audit?limit=20`).then((a) => a.data), [id, version]);
  return html`<section class="trail" aria-labelledby="trail-title">
    <h3 id="trail-title">History</h3>
    ${rows.error && html`<p class="muted">${rows.error.message}</p>`}
    ${rows.value && rows.value.length === 0 && html`<p class="muted">No recorded changes yet.</p>`}
    ${rows.value && rows.value.length > 0 && html`<ol class="audit">
      ${rows.value.map((r) => html`<li><strong>${r.action}</strong> by ${r.actor.username ?? r.actor.sub} · <time datetime=${r.at}>${new Date(r.at).toLocaleString()}</time>
        ${Object.keys(r.changes).length > 0 && html`<ul>${Object.entries(r.changes).map(([k, change]) => html`<li>${k}: ${describe(change)}</li>`)}</ul>`}</li>`)}
    </ol>`}
  </section>`;
}
