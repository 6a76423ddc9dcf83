// Sagas as the browser shows them (docs/workflows.md "Sagas"): pure helpers, tested in test/sagas.test.ts.

export type SagaStepMeta = { name: string; kind: string; compensation: string; timeout: string; retries: number; status_check: boolean };
export type SagaEntry = {
  seq: number; at: string; step: number | null; name: string | null; phase: string; attempt: number | null;
  outcome: string; detail: Record<string, unknown> | null; actor: string | null;
};
export type Saga = {
  id: string; service: string; action: string; state: string; step: number; attempts: number; in_flight: boolean;
  requested_by: string | null; params: Record<string, unknown>; results: Record<string, unknown>;
  failure: Record<string, unknown> | null; steps: SagaStepMeta[]; code?: string;
  created_at: string; updated_at: string; finished_at: string | null; timeline?: SagaEntry[];
};

export const PARKED = new Set(["outcome_unknown", "compensation_failed"]);

/** The shell's link to the operators' inbox, for whoever may resolve a saga (the server still
 * decides each decision); ``null`` for everyone else. */
export function sagaInboxLink(me: { resolves_sagas?: boolean } | null): { href: string; label: string } | null {
  return me?.resolves_sagas ? { href: "#/sagas", label: "Sagas" } : null;
}

const STATES: Record<string, string> = {
  running: "Running",
  compensating: "Compensating",
  completed: "Completed",
  compensated: "Compensated",
  outcome_unknown: "Outcome unknown",
  compensation_failed: "Compensation failed",
};

export function stateLabel(state: string): string {
  return STATES[state] ?? state;
}

/** One timeline entry as a sentence: who or what did what to which step, and why. */
export function describeEntry(e: SagaEntry): string {
  const step = e.name ? `${e.name}` : "saga";
  const attempt = e.attempt ? ` (attempt ${e.attempt})` : "";
  const reason = typeof e.detail?.reason === "string" ? `: ${e.detail.reason}` : "";
  const detail = typeof e.detail?.detail === "string" ? ` — ${e.detail.detail}` : "";
  if (e.phase === "person") {
    const applied = e.detail?.applied === true ? " as applied" : e.detail?.applied === false ? " as not applied" : "";
    return `${e.actor ?? "someone"} chose ${e.outcome} on ${step}${applied}${reason}`;
  }
  if (e.phase === "saga") {
    if (e.outcome === "accepted") return `accepted from ${e.actor ?? "a caller"}`;
    return `${stateLabel(e.outcome)}${e.name ? ` at ${step}` : ""}`;
  }
  const verb = e.phase === "undo" ? "compensation of" : e.phase === "status" ? "status check of" : "";
  const what = verb ? `${verb} ${step}` : step;
  const outcomes: Record<string, string> = {
    sent: "sent", done: "done", failed: "refused", refused: "refused", unknown: "outcome unknown",
    unavailable: "not applied", none: "nothing to undo (compensation: none)", applied: "says applied",
    not_applied: "says not applied",
  };
  return `${what}${attempt}: ${outcomes[e.outcome] ?? e.outcome}${detail}`;
}

/** Where each step stands, from the saga's row and timeline: done, undone, stuck, pending. */
export function stepStates(s: Saga): string[] {
  const done = new Set<string>();
  const undone = new Set<string>();
  for (const e of s.timeline ?? []) {
    if (e.outcome !== "done" && e.outcome !== "none") continue;
    if (e.phase === "do" && e.name) done.add(e.name);
    if (e.phase === "undo" && e.name) undone.add(e.name);
  }
  return s.steps.map((step, i) => {
    if (undone.has(step.name)) return "undone";
    if (i === s.step && PARKED.has(s.state)) return "stuck";
    if (i === s.step && (s.state === "running" || s.state === "compensating")) return "current";
    if (done.has(step.name)) return "done";
    return "pending";
  });
}

/** The decisions a person may take now, as the server accepts them. */
export function decisionsFor(s: Saga): { op: "retry" | "skip" | "resolve"; applied?: boolean; label: string; needsReason: boolean }[] {
  if (!PARKED.has(s.state)) return [];
  const forward = s.state === "outcome_unknown";
  return [
    { op: "retry", label: forward ? "Retry the step" : "Retry the compensation", needsReason: false },
    { op: "skip", label: forward ? "Skip as not applied" : "Skip (undone by hand)", needsReason: true },
    { op: "resolve", applied: true, label: forward ? "Resolve: it was applied" : "Resolve: it was undone", needsReason: true },
    ...(forward ? [{ op: "resolve" as const, applied: false, label: "Resolve: it was not applied", needsReason: true }] : []),
  ];
}
