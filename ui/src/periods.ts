// Accounting periods as the browser shows them (docs/server.md "Periods", docs/ui.md "Periods"):
// pure helpers, tested in test/periods.test.ts. The rule itself is the server's
// (dap/server/access/periods.py); these only read its answers so the form offers no write it
// would refuse.
import type { Period } from "./meta";

const STATES: Record<Period["state"], string> = { open: "Open", closing: "Closing", closed: "Closed" };

export function periodStateLabel(state: string): string {
  return STATES[state as Period["state"]] ?? state;
}

/** The calendar day of a date or datetime value as the server judges it: a datetime by its UTC
 * date, a date as written; null when there is none. */
export function dayOf(value: unknown): string | null {
  if (typeof value !== "string" || value === "") return null;
  if (/^\d{4}-\d{2}-\d{2}$/.test(value)) return value;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? null : at.toISOString().slice(0, 10);
}

/** The closed period a record's transaction date falls in, or null (open, closing or no period). */
export function closedPeriodOf(periods: Period[], value: unknown): Period | null {
  const day = dayOf(value);
  if (day === null) return null;
  return periods.find((p) => p.state === "closed" && p.starts <= day && day <= p.ends) ?? null;
}

/** Why a record dated in ``period`` is read-only: the sentence the form shows. */
export function readOnlyReason(period: Period): string {
  const why = period.reason ? ` (${period.reason})` : "";
  return `Read-only: dated in period ${period.name} (${period.starts} to ${period.ends}), closed${
    period.closed_by ? ` by ${period.closed_by}` : ""}${why}. Ask a holder of dap.periods.close to reopen it.`;
}

export type PeriodMove = { op: "start_closing" | "close" | "reopen"; label: string; needsReason: boolean };

/** The moves the server may accept for a period now (it still judges them: a reopen while a later
 * period is closed answers 409 SVC.PERIOD.REOPEN_DENIED, and the view shows that answer). */
export function movesFor(p: Period): PeriodMove[] {
  if (p.state === "open")
    return [
      { op: "start_closing", label: "Start closing", needsReason: false },
      { op: "close", label: "Close", needsReason: true },
    ];
  if (p.state === "closing") return [{ op: "close", label: "Close", needsReason: true }];
  return p.final ? [] : [{ op: "reopen", label: "Reopen", needsReason: true }];
}
