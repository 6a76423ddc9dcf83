// The sagas of a workspace (docs/workflows.md "Sagas"): #/sagas lists the parked ones the caller may
// settle (the operators' inbox); #/sagas/{id} shows one saga's steps and timeline (attempts,
// compensations, who decided what) and, while it is parked, the retry / skip / resolve actions.
import { useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { useLoad } from "../hooks";
import { html } from "../html";
import { type Saga, decisionsFor, describeEntry, stateLabel, stepStates } from "../sagas";

export function Sagas({ id }: { id: string | null }) {
  return html`<main id="main" class="sagas">${id ? html`<${SagaView} id=${id} />` : html`<${SagaInbox} />`}</main>`;
}

function SagaInbox() {
  const list = useLoad(() => get<Saga[]>("api/_sagas").then((a) => a.data), []);
  return html`<div class="inbox">
    <h2 id="sagas-title">Sagas waiting for a person</h2>
    ${list.error && html`<p class="error" role="alert">${list.error.message}</p>`}
    ${list.value && list.value.length === 0 && html`<p class="muted">No saga is parked.</p>`}
    ${list.value && list.value.length > 0 && html`<table aria-labelledby="sagas-title">
      <thead><tr><th scope="col">Saga</th><th scope="col">State</th><th scope="col">Stuck at</th><th scope="col">Requested by</th><th scope="col">Since</th></tr></thead>
      <tbody>${list.value.map((s) => html`<tr>
        <td data-label="Saga"><a href=${`#/sagas/${s.id}`}>${s.service}/${s.action}</a></td>
        <td data-label="State">${stateLabel(s.state)} <span class="muted">${s.code ?? ""}</span></td>
        <td data-label="Stuck at">${s.steps[s.step]?.name ?? ""}</td>
        <td data-label="Requested by">${s.requested_by ?? ""}</td>
        <td data-label="Since">${new Date(s.updated_at).toLocaleString()}</td>
      </tr>`)}</tbody>
    </table>`}
  </div>`;
}

function SagaView({ id }: { id: string }) {
  const saga = useLoad(() => get<Saga>(`api/_sagas/${encodeURIComponent(id)}`).then((a) => a.data), [id]);
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  if (saga.error) return html`<p class="error" role="alert">${saga.error.message}</p>`;
  if (!saga.value) return html`<p aria-busy="true">Loading…</p>`;
  const s = saga.value;
  const states = stepStates(s);
  const decide = async (op: string, applied: boolean | undefined, needsReason: boolean) => {
    if (needsReason && !reason.trim()) {
      setProblem("Say why: what was checked or done by hand.");
      return;
    }
    setBusy(true);
    setProblem(null);
    try {
      await call("POST", `api/_sagas/${encodeURIComponent(id)}/${op}`, { reason: reason.trim() || undefined, applied });
      setReason("");
      saga.reload();
    } catch (e) {
      setProblem(e instanceof Problem ? e.detail : String(e));
    } finally {
      setBusy(false);
    }
  };
  const decisions = decisionsFor(s);
  return html`<article aria-labelledby="saga-title">
    <p><a href="#/sagas">All parked sagas</a></p>
    <h2 id="saga-title">${s.service}/${s.action}: ${stateLabel(s.state)}</h2>
    ${s.code && html`<p class="error" role="status">${s.code}: ${String(s.failure?.detail ?? "")}</p>`}
    <ol class="saga-steps" aria-label="Steps">${s.steps.map((step, i) => html`<li class=${`saga-step ${states[i]}`}>
      <strong>${step.name}</strong> <span class="muted">${step.kind}; compensation ${step.compensation}${step.status_check ? "; status check" : ""}</span>
      <span class="badge">${states[i]}</span>
    </li>`)}</ol>
    ${decisions.length > 0 && html`<section aria-label="Settle this saga" class="buttons">
      <label>Reason <input value=${reason} onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)} /></label>
      ${decisions.map((d) => html`<button type="button" disabled=${busy} onClick=${() => decide(d.op, d.applied, d.needsReason)}>${d.label}</button>`)}
      ${problem && html`<p class="error" role="alert">${problem}</p>`}
    </section>`}
    <h3>Timeline</h3>
    <ol class="saga-timeline" aria-label="Timeline">${(s.timeline ?? []).map((e) => html`<li>
      <time datetime=${e.at}>${new Date(e.at).toLocaleTimeString()}</time> ${describeEntry(e)}
    </li>`)}</ol>
  </article>`;
}
