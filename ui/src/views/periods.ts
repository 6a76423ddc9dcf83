// The workspace's accounting periods (docs/ui.md "Periods"): #/periods lists them with their state,
// first and last day and whether they are final; start closing, close and reopen are actions that
// ask for a reason (the audit trail keeps it) and show the server's problem detail when refused
// (e.g. 409 SVC.PERIOD.REOPEN_DENIED while a later period is closed).
import { useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { useLoad } from "../hooks";
import { html } from "../html";
import type { Period } from "../meta";
import { movesFor, periodStateLabel } from "../periods";

export function Periods() {
  const list = useLoad(() => get<Period[]>("api/_periods").then((a) => a.data), []);
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const move = async (p: Period, op: string, label: string, needsReason: boolean) => {
    if (needsReason && !reason.trim()) {
      setProblem(`Say why before "${label}" of ${p.name}: the audit trail keeps the reason.`);
      return;
    }
    setBusy(true);
    setProblem(null);
    setNotice(null);
    try {
      await call("POST", `api/_periods/${encodeURIComponent(p.id)}/${op}`, reason.trim() ? { reason: reason.trim() } : {});
      setReason("");
      setNotice(`${p.name}: ${label.toLowerCase()} done.`);
      list.reload();
    } catch (e) {
      setProblem(e instanceof Problem ? `${e.code ? `${e.code}: ` : ""}${e.detail}` : String(e));
    } finally {
      setBusy(false);
    }
  };
  return html`<main id="main" class="periods">
    <p><a href="#/">Back to the apps</a></p>
    <h2 id="periods-title">Accounting periods</h2>
    ${list.error && html`<p class="error" role="alert">${list.error.message}</p>`}
    ${list.value && list.value.length === 0 && html`<p class="muted">This workspace has no period yet.</p>`}
    ${list.value && list.value.length > 0 && html`
      <label>Reason <input name="reason" value=${reason} onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)} /></label>
      <div role="status" aria-live="polite" class="notice">${notice}</div>
      ${problem && html`<p class="error" role="alert">${problem}</p>`}
      <table aria-labelledby="periods-title">
        <thead><tr><th scope="col">Period</th><th scope="col">State</th><th scope="col">First day</th><th scope="col">Last day</th><th scope="col">Final</th><th scope="col">Closed by</th><th scope="col">Actions</th></tr></thead>
        <tbody>${list.value.map((p) => html`<tr data-period=${p.name}>
          <td data-label="Period">${p.name}</td>
          <td data-label="State"><span class=${`badge ${p.state}`}>${periodStateLabel(p.state)}</span></td>
          <td data-label="First day">${p.starts}</td>
          <td data-label="Last day">${p.ends}</td>
          <td data-label="Final">${p.final ? "Yes" : "No"}</td>
          <td data-label="Closed by">${p.closed_by ?? ""}${p.reason ? html` <span class="muted">${p.reason}</span>` : ""}</td>
          <td data-label="Actions" class="buttons">${movesFor(p).map((m) => html`<button type="button" disabled=${busy}
            aria-label=${`${m.label} ${p.name}`} onClick=${() => move(p, m.op, m.label, m.needsReason)}>${m.label}</button>`)}</td>
        </tr>`)}</tbody>
      </table>`}
  </main>`;
}
