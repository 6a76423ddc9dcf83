// Grant requests in the inbox (issue 47; docs/server.md "Apps that use each other"): the requests
// other apps made to the apps the caller administers, with what each asks and who asked, and
// Grant, Refuse and Revoke (the last two with the reason the server requires). The server lists
// only the requests of apps the caller administers, so the section is empty (and hidden) for others.
import { useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { useLoad } from "../hooks";
import { html } from "../html";

export type GrantRequest = {
  id: string;
  consumer: string;
  owner: string;
  service: string;
  actions: string[];
  granted: string[];
  status: "pending" | "granted" | "refused" | "revoked";
  reason: string | null;
  requested_by: string;
  requested_at: string;
  decided_by: string | null;
};

type Verb = "grant" | "refuse" | "revoke";

/** The steps open on a request (the server's own rules, ``workflows.granting``): a pending one
 * is revoked only while it holds actions granted before its ask changed. */
export function stepsOf(request: Pick<GrantRequest, "status" | "granted">): Verb[] {
  if (request.status === "pending") return request.granted.length ? ["grant", "refuse", "revoke"] : ["grant", "refuse"];
  if (request.status === "granted") return ["grant", "revoke"];
  return ["grant"];
}

function Decide({ request, onDone }: { request: GrantRequest; onDone: (text: string) => void }) {
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const id = `grant-reason-${request.id}`;
  const step = async (verb: Verb) => {
    if (verb !== "grant" && !reason.trim()) return setProblem(`Say why to ${verb} it.`);
    setBusy(true);
    setProblem(null);
    try {
      await call<GrantRequest>("POST", `api/_grants/${request.id}/${verb}`, reason.trim() ? { reason: reason.trim() } : {});
      onDone(`${request.consumer}: ${verb === "grant" ? "granted" : verb === "refuse" ? "refused" : "revoked"}.`);
    } catch (e) {
      setProblem(e instanceof Problem ? e.detail : String(e));
    } finally {
      setBusy(false);
    }
  };
  return html`<div class="buttons vote">
    <label class="sr-only" for=${id}>Reason</label>
    <input id=${id} placeholder="Reason" value=${reason} onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)} />
    ${stepsOf(request).map((verb) => html`<button type="button" class=${verb === "grant" ? "primary" : "danger"} disabled=${busy}
      aria-label=${`${verb} ${request.consumer} ${request.service}`} onClick=${() => step(verb)}>${verb[0].toUpperCase() + verb.slice(1)}</button>`)}
    ${problem && html`<p class="error" role="alert">${problem}</p>`}
  </div>`;
}

/** The grant requests made to the apps I administer: pending and granted ones (to revoke). */
export function GrantRequests() {
  const [notice, setNotice] = useState<string | null>(null);
  const items = useLoad(async () => (await get<GrantRequest[]>("api/_grants")).data.filter((g) => g.status === "pending" || g.status === "granted"), []);
  if (!items.value || items.value.length === 0) return html`<div role="status" aria-live="polite" class="notice">${notice}</div>`;
  return html`<section class="inbox grants" aria-labelledby="grants-title">
    <h2 id="grants-title">Grant requests from other apps</h2>
    <div role="status" aria-live="polite" class="notice">${notice}</div>
    <table aria-labelledby="grants-title">
      <thead><tr><th scope="col">App asking</th><th scope="col">Of</th><th scope="col">Asks</th><th scope="col">Status</th><th scope="col">Requested by</th><th scope="col">Decide</th></tr></thead>
      <tbody>${items.value.map((g) => html`<tr>
        <td data-label="App asking">${g.consumer}</td>
        <td data-label="Of">${g.owner}: ${g.service}</td>
        <td data-label="Asks">${g.actions.join(", ")}${g.granted.length ? html`<span class="muted"> (granted: ${g.granted.join(", ")})</span>` : ""}</td>
        <td data-label="Status">${g.status}${g.reason ? html`<span class="muted">: ${g.reason}</span>` : ""}</td>
        <td data-label="Requested by">${g.requested_by}</td>
        <td data-label="Decide"><${Decide} request=${g} onDone=${(text: string) => { setNotice(text); items.reload(); }} /></td>
      </tr>`)}</tbody>
    </table>
  </section>`;
}
