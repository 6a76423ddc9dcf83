import { describe, expect, it } from "vitest";
import type { EntityMeta, FieldMeta, Me } from "../src/meta";
import { columnsOf, movesOf } from "../src/views/kanban";

const field = (name: string, extra: Partial<FieldMeta> = {}): FieldMeta => ({
  name, caption: name, help: null, type: "enum", required: false, read_only: false, immutable: false, masked: false,
  multiple: false, default: null, ...extra,
});
const meta: EntityMeta = {
  name: "buying/purchase_order", title: "Order", lifecycle: true, rest: ["list", "find", "update"], api: "api/buying/purchase_order",
  fields: [field("state"), field("priority", { options: [{ value: "low", label: "Low" }, { value: "high", label: "High" }] })],
  filters: [],
  actions: [{ name: "approve", description: null, required_permission: "p.approve", ui: null, conditions: [] }],
  state_machine: {
    field: "state", states: ["open", "pending_approval", "approved"], initial: "open",
    transitions: [
      { name: "request", action: "request_approval", from: ["open"], to: "pending_approval", approval: null },
      { name: "approve", action: "approve", from: ["pending_approval"], to: "approved", approval: null },
      { name: "gated", action: "escalate", from: ["open"], to: "approved", approval: { steps: [], on_reject: null, allow_self_approval: false } },
    ],
  },
  runnable: ["approve", "escalate", "request_approval"], // escalate: gated, runnable (202), never a move
};
const clerk: Me = { username: "c", roles: ["buyer"], permissions: { "p.approve": false } };
const boss: Me = { username: "b", roles: ["boss"], permissions: { "p.approve": true } };

describe("kanban columns and moves", () => {
  it("has a column per state, or per option of an enum", () => {
    expect(columnsOf(meta, "state").map((c) => c.label)).toEqual(["Open", "Pending approval", "Approved"]);
    expect(columnsOf(meta, "priority").map((c) => c.value)).toEqual(["low", "high"]);
  });
  it("moves a card only along transitions the caller may run (never a gated one)", () => {
    const open = { docstatus: "draft", state: "open" };
    expect([...movesOf(meta, open, "state", clerk)]).toEqual([["pending_approval", "request_approval"]]);
    expect([...movesOf(meta, { ...open, state: "pending_approval" }, "state", clerk)]).toEqual([]);
    expect([...movesOf(meta, { ...open, state: "pending_approval" }, "state", boss)]).toEqual([["approved", "approve"]]);
  });
  it("moves a card between enum columns by an update, where the record may be edited", () => {
    expect([...movesOf(meta, { docstatus: "draft", priority: "low" }, "priority", clerk)]).toEqual([["high", null]]);
    expect([...movesOf(meta, { docstatus: "submitted", priority: "low" }, "priority", clerk)]).toEqual([]);
  });
});
