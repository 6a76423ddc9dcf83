import { describe, expect, it } from "vitest";
import {
  buttonsFor, canEdit, computeLive, fieldState, filterDefault, formatValue, interpolate, listQuery, moveRow,
  nextSort, payloadOf, problemsByPath, visibleFields,
} from "../src/logic";
import type { EntityMeta, FieldMeta, Me } from "../src/meta";
import { parseRoute, pageHref } from "../src/route";
import { workspaceOf } from "../src/api";
import { contextOf } from "../src/logic";

const f = (name: string, type: string, extra: Partial<FieldMeta> = {}): FieldMeta => ({
  name, caption: name, help: null, type, required: false, read_only: false, immutable: false, masked: false,
  multiple: false, default: null, ...extra,
});

const lines = f("lines", "child", {
  child: {
    storage: "table", sequence_field: "idx",
    fields: [f("idx", "integer"), f("qty", "decimal", { scale: 3 }), f("unit_price", "money", { scale: 2 }),
      f("amount", "money", { scale: 2, read_only: true, computed: { formula: "round(qty * unit_price, 2)" } })],
  },
});
const order: EntityMeta = {
  name: "buying/purchase_order", title: "Purchase order", lifecycle: true, rest: ["create", "delete", "find", "list", "update"],
  api: "api/buying/purchase_order",
  fields: [
    f("supplier", "relation", { required: true }), lines,
    f("total", "money", { scale: 2, read_only: true, computed: { formula: "sum(lines.amount)" } }),
    f("notes", "text", { visible_when: "total > 1000", required_when: "total > 5000" }),
    f("region", "string", { readonly_when: "total > 100" }),
    f("state", "enum"),
  ],
  filters: [],
  actions: [
    { name: "submit", description: null, required_permission: null, ui: null, conditions: [{ script: "total > 0", message: "empty" }] },
    { name: "approve", description: null, required_permission: "buying.purchase_order.approve", ui: null, conditions: [] },
    { name: "request_approval", description: null, required_permission: null, ui: { button_label: "Request approval" }, conditions: [] },
    { name: "reject", description: null, required_permission: "buying.purchase_order.approve", ui: null, conditions: [] },
  ],
  state_machine: {
    field: "state", states: ["open", "pending", "approved"], initial: "open",
    transitions: [
      { name: "request", action: "request_approval", from: ["open"], to: "pending", approval: null },
      { name: "approve", action: "approve", from: ["pending"], to: "approved", approval: null },
    ],
  },
  runnable: ["approve", "request_approval"],
};
const buyer: Me = { username: "bob", roles: ["buyer"], permissions: { "buying.purchase_order.approve": false } };
const manager: Me = { username: "ann", roles: ["buying_manager"], permissions: { "buying.purchase_order.approve": true } };
const labels = (me: Me, record: Record<string, unknown>) => buttonsFor(order, record, me).map((b) => b.label);

describe("buttons shown exactly when the API allows them", () => {
  it("offers submit on a draft only while its condition holds", () => {
    expect(labels(buyer, { docstatus: "draft", total: "10.00", state: "open" })).toEqual(["Submit", "Request approval", "Delete"]);
    expect(labels(buyer, { docstatus: "draft", total: "0.00", state: "open" })).toEqual(["Request approval", "Delete"]);
  });
  it("offers cancel on a submitted document, never delete", () => {
    expect(labels(buyer, { docstatus: "submitted", total: "10.00", state: "open" })).toEqual(["Cancel", "Request approval"]);
  });
  it("offers a transition from its states only, and only with its permission", () => {
    expect(labels(buyer, { docstatus: "submitted", state: "pending" })).toEqual(["Cancel"]);
    expect(labels(manager, { docstatus: "submitted", state: "pending" })).toEqual(["Cancel", "Approve"]);
    expect(labels({ ...buyer, roles: ["admin"] }, { docstatus: "submitted", state: "pending" })).toContain("Approve");
  });
  it("never offers an action the server does not run", () => {
    expect(labels(manager, { docstatus: "draft", state: "open", total: "1" })).not.toContain("Reject");
  });
  it("edits drafts only", () => {
    expect(canEdit(order, { docstatus: "draft" }, buyer)).toBe(true);
    expect(canEdit(order, { docstatus: "submitted" }, buyer)).toBe(false);
    expect(canEdit({ ...order, rest: ["list", "find"] }, null, buyer)).toBe(false);
  });
});

describe("fields behind a permission", () => {
  it("are left out for callers without it, as the server leaves them out", () => {
    const fields = [f("name", "string"), f("iban", "string", { required_permission: "buying.supplier.read_bank" })];
    expect(visibleFields(fields, buyer).map((x) => x.name)).toEqual(["name"]);
    expect(visibleFields(fields, { ...buyer, permissions: { "buying.supplier.read_bank": true } }).map((x) => x.name)).toEqual(["name", "iban"]);
    expect(visibleFields(fields, { ...buyer, roles: ["admin"] })).toHaveLength(2);
  });
});

describe("field rules evaluated live", () => {
  const state = (name: string, record: Record<string, unknown>) =>
    fieldState(order.fields.find((x) => x.name === name) as FieldMeta, contextOf(order.fields, record), { creating: false, editable: true });
  it("shows, requires and locks by the record's values", () => {
    expect(state("notes", { total: "999.99" }).visible).toBe(false);
    expect(state("notes", { total: "1000.01" })).toEqual({ visible: true, readonly: false, required: false });
    expect(state("notes", { total: "5000.01" }).required).toBe(true);
    expect(state("region", { total: "100.01" }).readonly).toBe(true);
    expect(state("region", { total: "abc" }).readonly).toBe(false); // unknown counts as false
    expect(state("total", {}).readonly).toBe(true);
  });
});

describe("computed values", () => {
  it("derives child rows first, then the record", () => {
    const out = computeLive(order.fields, { lines: [{ qty: "4", unit_price: "2.50" }, { qty: "0.333", unit_price: "1.00" }] });
    expect((out.lines as Record<string, unknown>[]).map((r) => r.amount)).toEqual(["10.00", "0.33"]);
    expect(out.total).toBe("10.33");
  });
  it("leaves a value it cannot derive yet", () => {
    expect(computeLive(order.fields, { lines: [{ qty: "x" }] }).total).toBe("0.00");
  });
});

describe("list queries", () => {
  const filters = [
    { field: "docstatus", type: "select" as const },
    { field: "order_date", type: "date_range" as const },
    { field: "name", type: "text" as const },
    { field: "total", type: "text" as const, op: "gte" },
  ];
  it("turns filter values into API parameters and leaves empty ones out", () => {
    const q = new URLSearchParams(listQuery(filters, { docstatus: "draft", "order_date.from": "2024-01-01", "order_date.to": "2024-02-01", name: "50%" }, { sort: "-order_date", offset: 25, limit: 25 }));
    expect(q.get("docstatus")).toBe("draft");
    expect(q.get("order_date[between]")).toBe("2024-01-01,2024-02-01");
    expect(q.get("name[ilike]")).toBe("%50\\%%");
    expect(q.has("total[gte]")).toBe(false);
    expect([q.get("sort"), q.get("offset"), q.get("limit"), q.get("count")]).toEqual(["-order_date", "25", "25", "true"]);
    expect(new URLSearchParams(listQuery(filters, { "order_date.from": "2024-01-01" }, { offset: 0, limit: 5 })).get("order_date[gte]")).toBe("2024-01-01");
  });
  it("always sends the page's fixed parameters, beside the user's filters", () => {
    const q = new URLSearchParams(listQuery(filters, { docstatus: "draft" }, { offset: 0, limit: 5, fixed: { borrower: "m1", "total[gte]": "10", limit: "999" } }));
    expect([q.get("borrower"), q.get("total[gte]"), q.get("docstatus"), q.get("limit")]).toEqual(["m1", "10", "draft", "5"]);
  });
  it("defaults a filter to today", () => {
    expect(filterDefault({ field: "d", default: "today" }, "2026-11-24")).toBe("2026-11-24");
    expect(filterDefault({ field: "d" }, "2026-11-24")).toBe("");
  });
  it("cycles a column's sort", () => {
    expect(nextSort(undefined, "total", "-created_at")).toBe("total");
    expect(nextSort("total", "total", "-created_at")).toBe("-total");
    expect(nextSort("-total", "total", "-created_at")).toBe("-created_at");
  });
});

describe("forms", () => {
  it("sends what changed, never read-only or computed fields", () => {
    const fields = [f("a", "string"), f("b", "string", { read_only: true }), f("c", "money", { computed: { formula: "1" } }), f("d", "string", { immutable: true }), lines];
    expect(payloadOf(fields, { a: "x", b: "y", c: "1", d: "z", lines: [{ idx: 1, qty: "1", amount: "3" }] }, { creating: true }))
      .toEqual({ a: "x", d: "z", lines: [{ idx: 1, qty: "1" }] });
    expect(payloadOf(fields, { a: "x", d: "changed" }, { creating: false, original: { a: "x", d: "z" } })).toEqual({});
  });
  it("reorders child rows and renumbers them", () => {
    expect(moveRow([{ k: "a", idx: 1 }, { k: "b", idx: 2 }], 1, -1, "idx")).toEqual([{ k: "b", idx: 1 }, { k: "a", idx: 2 }]);
    expect(moveRow([{ k: "a" }], 0, -1, null)).toEqual([{ k: "a" }]);
  });
  it("puts problems on their paths and fills confirm texts", () => {
    const p = problemsByPath([{ path: "lines[1].qty", message: "required" }, { path: "lines[1].qty", message: "> 0" }]);
    expect(p.get("lines[1].qty")).toBe("required; > 0");
    expect(interpolate("Delete {name}?", { name: "ACME" })).toBe("Delete ACME?");
  });
  it("formats money with its currency, options by label, masks", () => {
    expect(formatValue(f("t", "money", { currency: "EUR", scale: 2 }), "15.00")).toBe("€15.00");
    expect(formatValue(f("e", "enum", { options: [{ value: "north", label: "North" }] }), "north")).toBe("North");
    expect(formatValue(f("m", "string", { masked: true }), "****")).toBe("••••");
  });
});

describe("routes", () => {
  it("reads the workspace from the path and the page from the hash", () => {
    expect(workspaceOf("/acme/")).toBe("acme");
    expect(parseRoute("#/a/buying/purchasing/order/123")).toMatchObject({ kind: "page", app: "buying/purchasing", page: "order", id: "123" });
    expect(parseRoute("#/login").kind).toBe("login");
    expect(parseRoute("").kind).toBe("home");
    expect(pageHref("buying/purchasing", "buying/orders")).toBe("#/a/buying/purchasing/orders");
  });
});
