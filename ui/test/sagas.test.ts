import { describe, expect, it } from "vitest";
import { type Saga, type SagaEntry, decisionsFor, describeEntry, sagaInboxLink, stepStates } from "../src/sagas";
import { parseRoute } from "../src/route";

const steps = ["hold", "charge", "notify"].map((name) => ({
  name, kind: "http", compensation: name === "notify" ? "none" : "http", timeout: "1s", retries: 1, status_check: false,
}));
const entry = (seq: number, name: string | null, phase: string, outcome: string, extra: Partial<SagaEntry> = {}): SagaEntry => ({
  seq, at: "2026-11-28T12:00:00Z", step: null, name, phase, attempt: 1, outcome, detail: null, actor: null, ...extra,
});

const parked: Saga = {
  id: "s1", service: "store/trip", action: "book", state: "outcome_unknown", step: 1, attempts: 2, in_flight: true,
  requested_by: "alice", params: {}, results: {}, failure: { detail: "charge timed out" }, steps,
  code: "SVC.SAGA.OUTCOME_UNKNOWN", created_at: "", updated_at: "", finished_at: null,
  timeline: [entry(1, "hold", "do", "sent"), entry(2, "hold", "do", "done"), entry(3, "charge", "do", "sent"), entry(4, "charge", "do", "unknown")],
};

describe("sagas", () => {
  it("links the inbox for whoever may resolve a saga, and for no one else", () => {
    expect(sagaInboxLink({ resolves_sagas: true })).toEqual({ href: "#/sagas", label: "Sagas" });
    expect(sagaInboxLink({ resolves_sagas: false })).toBeNull();
    expect(sagaInboxLink({})).toBeNull(); // a server without sagas says nothing
    expect(sagaInboxLink(null)).toBeNull();
  });

  it("routes #/sagas and #/sagas/{id}", () => {
    expect(parseRoute("#/sagas")).toEqual({ kind: "sagas", id: null });
    expect(parseRoute("#/sagas/abc")).toEqual({ kind: "sagas", id: "abc" });
  });

  it("marks each step done, stuck or pending", () => {
    expect(stepStates(parked)).toEqual(["done", "stuck", "pending"]);
    const compensated = { ...parked, state: "compensated", step: -1, timeline: [...parked.timeline!, entry(5, "hold", "undo", "done")] };
    expect(stepStates(compensated)).toEqual(["undone", "pending", "pending"]);
  });

  it("offers the decisions the server accepts for each parked state", () => {
    expect(decisionsFor(parked).map((d) => [d.op, d.applied ?? null])).toEqual([
      ["retry", null], ["skip", null], ["resolve", true], ["resolve", false],
    ]);
    expect(decisionsFor({ ...parked, state: "compensation_failed" }).map((d) => d.op)).toEqual(["retry", "skip", "resolve"]);
    expect(decisionsFor({ ...parked, state: "completed" })).toEqual([]);
    expect(decisionsFor(parked).filter((d) => d.needsReason).map((d) => d.op)).toEqual(["skip", "resolve", "resolve"]);
  });

  it("tells who resolved what, and every attempt", () => {
    const person = entry(6, "charge", "person", "resolve", { actor: "bob", detail: { applied: true, reason: "bank shows it" } });
    expect(describeEntry(person)).toBe("bob chose resolve on charge as applied: bank shows it");
    expect(describeEntry(entry(7, "charge", "undo", "done"))).toBe("compensation of charge (attempt 1): done");
    expect(describeEntry(entry(8, "charge", "do", "unknown"))).toBe("charge (attempt 1): outcome unknown");
    expect(describeEntry(entry(9, "notify", "undo", "none", { attempt: null }))).toBe("compensation of notify: nothing to undo (compensation: none)");
  });
});
