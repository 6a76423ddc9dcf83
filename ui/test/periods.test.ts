import { describe, expect, it } from "vitest";
import type { Period } from "../src/meta";
import { closedPeriodOf, dayOf, movesFor, readOnlyReason } from "../src/periods";
import { parseRoute } from "../src/route";

const period = (name: string, starts: string, ends: string, state: Period["state"], extra: Partial<Period> = {}): Period => ({
  id: name, name, starts, ends, state, final: false, closed_at: null, closed_by: null, reason: null, ...extra,
});
const periods = [
  period("2026-10", "2026-10-01", "2026-10-31", "closed", { closed_by: "carla", reason: "books done" }),
  period("2026-11", "2026-11-01", "2026-11-30", "closing"),
  period("2026-12", "2026-12-01", "2026-12-31", "open"),
];

describe("periods", () => {
  it("reads a date as written and a datetime by its UTC day, as the server judges it", () => {
    expect(dayOf("2026-10-31")).toBe("2026-10-31");
    expect(dayOf("2026-11-01T00:30:00+02:00")).toBe("2026-10-31");
    expect(dayOf("")).toBeNull();
    expect(dayOf(null)).toBeNull();
    expect(dayOf("not a date")).toBeNull();
  });

  it("finds the closed period of a date, first and last day included, and only a closed one", () => {
    expect(closedPeriodOf(periods, "2026-10-01")?.name).toBe("2026-10");
    expect(closedPeriodOf(periods, "2026-10-31")?.name).toBe("2026-10");
    expect(closedPeriodOf(periods, "2026-11-01")).toBeNull(); // closing: the server judges the caller
    expect(closedPeriodOf(periods, "2026-12-24")).toBeNull();
    expect(closedPeriodOf(periods, "2027-01-01")).toBeNull(); // no period
    expect(closedPeriodOf(periods, null)).toBeNull();
  });

  it("says why a record is read-only: the period, its days, who closed it and why", () => {
    const text = readOnlyReason(periods[0]);
    expect(text).toContain("2026-10 (2026-10-01 to 2026-10-31)");
    expect(text).toContain("by carla (books done)");
    expect(text).toContain("dap.periods.close");
  });

  it("offers the moves of each state; a final period offers none", () => {
    expect(movesFor(periods[2]).map((m) => m.op)).toEqual(["start_closing", "close"]);
    expect(movesFor(periods[1]).map((m) => m.op)).toEqual(["close"]);
    expect(movesFor(periods[0])).toEqual([{ op: "reopen", label: "Reopen", needsReason: true }]);
    expect(movesFor({ ...periods[0], final: true })).toEqual([]);
    expect(movesFor(periods[2]).find((m) => m.op === "close")?.needsReason).toBe(true);
  });

  it("routes #/periods", () => {
    expect(parseRoute("#/periods")).toEqual({ kind: "periods" });
  });
});
