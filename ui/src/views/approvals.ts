// Approval gates in the browser (docs/workflows.md "Approval gates"): the inbox of an
// ``ApprovalInbox`` (my pending approvals, with Approve and Reject), and on a record its approval's
// steps, votes and history with the same two buttons. Approve and Reject are shown exactly when the
// approval is in the caller's inbox, which the server answers with the same rules it votes by
// (roles, permission, escalation, self-approval, one live vote per step).
import { useEffect, useRef, useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { useLive, useLoad } from "../hooks";
import { html } from "../html";
import { formatValue } from "../logic";
import type { AppDetail, Approval, EntityMeta, Gate, InboxComp, Row } from "../meta";
import { pageHref } from "../route";
import { entityMeta } from "../store";
import { formPage } from "../titles";
import { GrantRequests } from "./grants";
import { relationLabels } from "./table";

/** The ids of the approvals the caller may vote on now (entity: one entity's only). */
export async function votable(entity: string | null): Promise<Set<string>> {
  const q = entity ? `&entity=${encodeURIComponent(entity)}` : "";
  const answer = await get<Approval[]>(`api/_approvals?limit=500${q}`);
  return new Set(answer.data.map((a) => a.id));
}

/** A record's approvals (newest first) and which of them the caller may vote on. */
export async function recordApprovals(meta: EntityMeta, id: string): Promise<{ list: Approval[]; mine: Set<string> }> {
  const [list, mine] = await Promise.all([
    get<Approval[]>(`${meta.api}/${id}/_approvals`).then((a) => a.data),
    votable(meta.name),
  ]);
  return { list, mine };
}

/** The gate of an approval's transition, from the entity metadata. */
export function gateOf(meta: EntityMeta, approval: Approval): Gate | null {
  return meta.state_machine?.transitions.find((t) => t.name === approval.transition || t.action === approval.action)?.approval ?? null;
}

/** The entity's gated actions: their buttons hide while an approval of the record is pending. */
export function gatedActions(meta: EntityMeta): Set<string> {
  return new Set((meta.state_machine?.transitions ?? []).filter((t) => t.approval).map((t) => t.action));
}

type Verdict = "approve" | "reject";

async function vote(approval: Approval, verdict: Verdict, comment: string): Promise<Approval> {
  const answer = await call<unknown>("POST", `api/_approvals/${approval.id}/${verdict}`, comment ? { comment } : {});
  return answer.raw.approval as Approval;
}

function outcome(a: Approval, verdict: Verdict): string {
  if (verdict === "reject") return "Rejected.";
  if (a.status === "approved" || !a.step) return `Approved: the record moved to ${a.to.replace(/_/g, " ")}.`;
  return `Vote counted: ${a.step.title} ${a.step.votes} of ${a.step.approvers}.`;
}

/** Approve and Reject for one approval; Reject asks for a comment in a modal dialog. */
function Vote({ approval, label, onDone }: { approval: Approval; label: string; onDone: (text: string) => void }) {
  const [rejecting, setRejecting] = useState(false);
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const cast = async (verdict: Verdict, comment = "") => {
    setBusy(true);
    setProblem(null);
    try {
      const after = await vote(approval, verdict, comment);
      setRejecting(false);
      onDone(outcome(after, verdict));
    } catch (e) {
      setProblem(e instanceof Problem ? e.detail : String(e));
    } finally {
      setBusy(false);
    }
  };
  return html`<div class="buttons vote">
    <button type="button" class="primary" disabled=${busy} aria-label=${`Approve ${label}`} onClick=${() => cast("approve")}>Approve</button>
    <button type="button" class="danger" disabled=${busy} aria-label=${`Reject ${label}`} onClick=${() => setRejecting(true)}>Reject</button>
    ${problem && html`<p class="error" role="alert">${problem}</p>`}
    ${rejecting && html`<${RejectDialog} label=${label} busy=${busy} problem=${problem} onCancel=${() => setRejecting(false)} onReject=${(c: string) => cast("reject", c)} />`}
  </div>`;
}

function RejectDialog({ label, busy, problem, onCancel, onReject }: { label: string; busy: boolean; problem: string | null; onCancel: () => void; onReject: (comment: string) => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [comment, setComment] = useState("");
  const [missing, setMissing] = useState(false);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  const submit = (e: Event) => {
    e.preventDefault();
    if (!comment.trim()) return setMissing(true);
    onReject(comment.trim());
  };
  return html`<dialog ref=${ref} aria-labelledby="reject-title" onCancel=${onCancel}>
    <form onSubmit=${submit} novalidate>
      <h2 id="reject-title">Reject ${label}</h2>
      <div class="field">
        <label for="reject-comment">Why? (required)</label>
        <textarea id="reject-comment" required aria-required="true" aria-invalid=${missing ? "true" : "false"}
          aria-describedby=${missing ? "reject-comment-error" : undefined} autofocus
          onInput=${(e: Event) => { setComment((e.target as HTMLTextAreaElement).value); setMissing(false); }}>${comment}</textarea>
        ${missing && html`<p class="error" id="reject-comment-error">A comment is required to reject.</p>`}
      </div>
      ${problem && html`<p class="error" role="alert">${problem}</p>`}
      <div class="buttons">
        <button class="danger" type="submit" disabled=${busy}>Reject</button>
        <button type="button" onClick=${onCancel}>Back</button>
      </div>
    </form>
  </dialog>`;
}

/** On a record: its latest approval's steps, votes and history, and Approve/Reject when eligible. */
export function ApprovalPanel({ meta, approvals, label, onDecided }: { meta: EntityMeta; approvals: { list: Approval[]; mine: Set<string> }; label: string; onDecided: (text: string) => void }) {
  const approval = approvals.list[0];
  if (!approval) return null;
  const gate = gateOf(meta, approval);
  const steps = gate?.steps ?? [];
  const current = approval.step?.index ?? -1;
  const stepState = (i: number) => {
    if (approval.status === "approved" || i < current) return "done";
    if (i === current) return approval.status === "pending" ? "current" : approval.status;
    return approval.status === "pending" ? "waiting" : "—";
  };
  return html`<section class="approval" aria-labelledby="approval-title">
    <h3 id="approval-title">Approval: ${approval.status}</h3>
    <p class="muted">${approval.transition.replace(/_/g, " ")} → ${approval.to.replace(/_/g, " ")}, requested by ${approval.requested_by ?? "?"}</p>
    <ol class="steps">
      ${steps.map((s, i) => html`<li class=${`step ${stepState(i)}`}>
        <strong>${s.title}</strong>: ${i === current && approval.status === "pending" ? `${approval.step?.votes ?? 0} of ${s.approvers} votes` : stepState(i)}
        <span class="muted"> (${s.roles.length ? s.roles.join(", ") : "any role"})</span>
      </li>`)}
    </ol>
    ${approval.history && approval.history.length > 0 && html`<ul class="audit">
      ${approval.history.filter((h) => h.event !== "closed").map((h) => html`<li>${h.event}${h.step ? ` (${h.step})` : ""}${h.by ? ` by ${h.by}` : ""}${h.comment ? `: ${h.comment}` : ""}</li>`)}
    </ul>`}
    ${approval.status === "pending" && approvals.mine.has(approval.id) && html`<${Vote} approval=${approval} label=${label} onDone=${onDecided} />`}
  </section>`;
}

/** An ``ApprovalInbox`` block: my pending approvals of its entities, oldest first. */
export function InboxBlock({ name, inbox, app }: { name: string; inbox: InboxComp; app: AppDetail }) {
  const [notice, setNotice] = useState<string | null>(null);
  const items = useLoad(async () => {
    const list = (await get<Approval[]>(`api/_approvals?limit=100&inbox=${encodeURIComponent(name)}`)).data;
    const metas = new Map<string, EntityMeta>();
    for (const name of new Set(list.map((a) => a.entity))) metas.set(name, await entityMeta(name));
    const labels = new Map<string, string>();
    for (const [name, meta] of metas) {
      const rows = list.filter((a) => a.entity === name).map((a) => a.display ?? {});
      const fields = [...new Set(rows.flatMap((r) => Object.keys(r)))];
      for (const [k, v] of await relationLabels(meta, rows as Row[], fields)) labels.set(k, v);
    }
    return { list, metas, labels };
  }, []);
  for (const entity of inbox.entities) useLive(entity, null, items.reload); // fixed list per manifest
  const title = inbox.title ?? "Approvals";
  return html`<div class="inbox">
    <h2 id="inbox-title">${title}</h2>
    <div role="status" aria-live="polite" class="notice">${notice}</div>
    ${items.error && html`<p class="error" role="alert">${items.error.message}</p>`}
    ${items.value && items.value.list.length === 0 && html`<p class="muted">Nothing waits for your approval.</p>`}
    ${items.value && items.value.list.length > 0 && html`<table aria-labelledby="inbox-title">
      <thead><tr><th scope="col">Record</th><th scope="col">Details</th><th scope="col">Step</th><th scope="col">Requested by</th><th scope="col">Decide</th></tr></thead>
      <tbody>${items.value.list.map((a) => {
        const meta = items.value?.metas.get(a.entity) as EntityMeta;
        const target = formPage(app, Object.entries(app.components).find(([, c]) => c.kind === "form" && c.entity === a.entity)?.[0]);
        const shown = Object.entries(a.display ?? {}).map(([k, v]) => [meta.fields.find((f) => f.name === k), k, v] as const);
        const label = `${meta.title.toLowerCase()} ${shown.map(([f, , v]) => formatValue(f, v, items.value?.labels)).filter(Boolean).join(", ")}`;
        return html`<tr>
          <td data-label="Record">${target ? html`<a href=${pageHref(app.name, target, a.record_id)}>${meta.title}</a>` : meta.title}</td>
          <td data-label="Details">${shown.map(([field, k, v]) => html`<span class="kv"><span class="muted">${field?.caption ?? k}:</span> ${formatValue(field, v, items.value?.labels) || "—"} </span>`)}</td>
          <td data-label="Step">${a.step ? `${a.step.title} (${a.step.votes} of ${a.step.approvers})` : ""}</td>
          <td data-label="Requested by">${a.requested_by ?? ""}</td>
          <td data-label="Decide"><${Vote} approval=${a} label=${label} onDone=${(text: string) => { setNotice(text); items.reload(); }} /></td>
        </tr>`;
      })}</tbody>
    </table>`}
    <${GrantRequests} />
  </div>`;
}
