import { describe, expect, it } from "vitest";
import type { ContextDecl } from "../src/contexts";
import { type GrantMeta, blockedBlock, blockedContexts, missingGrant } from "../src/grants";

const grant = (status: GrantMeta["status"], granted: string[]): GrantMeta => ({
  service: "buying/ordering", owner: "buying/purchasing", owner_title: "Purchasing", asked: ["quote", "place"], status, granted,
});
const quote: ContextDecl = { name: "quote", source: "api", call: "buying.ordering.quote" };
const place: ContextDecl = { name: "order", source: "api", call: "buying/ordering.place" };
const other: ContextDecl = { name: "stats", source: "api", call: "stock.desk.stats" };
const me: ContextDecl = { name: "me", source: "session", value: "username" };

describe("missing grants", () => {
  it.each([
    ["pending", [], "Purchasing has not yet decided on the access of Supplier portal to quote of buying/ordering"],
    ["refused", [], "Purchasing refused the access of Supplier portal to quote"],
    ["revoked", [], "Purchasing revoked the access"],
    ["not_requested", [], "has not been asked for"],
    ["granted", ["place"], "Purchasing granted Supplier portal other actions of buying/ordering, not quote"],
  ] as const)("a %s grant stops the call and says why", (status, granted, why) => {
    expect(missingGrant(quote, [grant(status, [...granted])], "Supplier portal")).toContain(why);
  });

  it("lets granted actions, other services and other sources run", () => {
    const grants = [grant("granted", ["quote"])];
    expect(missingGrant(quote, grants, "Portal")).toBeNull();
    expect(missingGrant(other, grants, "Portal")).toBeNull();
    expect(missingGrant(me, grants, "Portal")).toBeNull();
    expect(missingGrant(quote, [], "Portal")).toBeNull();
  });

  it("names the contexts a page may not run and the blocks that use them", () => {
    const blocked = blockedContexts([me, quote, place, other], [grant("granted", ["quote"])], "Portal");
    expect(Object.keys(blocked)).toEqual(["order"]);
    expect(blockedBlock({ props: { text: "Total {context.order.total}" } }, blocked)).toContain("not place");
    expect(blockedBlock({ param: { order: "{context.order}" } }, blocked)).toContain("Purchasing");
    expect(blockedBlock({ props: { text: "{context.orders.total} {context.quote.sum}" } }, blocked)).toBeNull();
    expect(blockedBlock({}, blocked)).toBeNull();
  });
});

describe("grant request steps", () => {
  it("offers what the server allows from each status", async () => {
    const { stepsOf } = await import("../src/views/grants");
    expect(stepsOf({ status: "pending", granted: [] })).toEqual(["grant", "refuse"]);
    expect(stepsOf({ status: "pending", granted: ["quote"] })).toEqual(["grant", "refuse", "revoke"]);
    expect(stepsOf({ status: "granted", granted: ["quote"] })).toEqual(["grant", "revoke"]);
    expect(stepsOf({ status: "refused", granted: [] })).toEqual(["grant"]);
    expect(stepsOf({ status: "revoked", granted: [] })).toEqual(["grant"]);
  });
});
