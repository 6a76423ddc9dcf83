import { describe, expect, it } from "vitest";
import {
  type ContextDecl, type Env, type Loader, type Memo, callOf, fill, fillProps, forget, fromExpr, idOf, pick,
  qualified, resolveContexts, textOf, toExpr,
} from "../src/contexts";
import { Dec } from "../src/expr";
import type { FieldMeta, Row } from "../src/meta";

const f = (name: string, type: string): FieldMeta => ({
  name, caption: name, help: null, type, required: false, read_only: false, immutable: false, masked: false,
  multiple: false, default: null,
});
const memberFields = [f("full_name", "string"), f("card", "string"), f("fines", "decimal"), f("joined", "date")];

/** A loader over an in-memory store that counts its reads; a record named ``secret`` is refused. */
function store(records: Record<string, Row>) {
  const reads: string[] = [];
  const loader: Loader = {
    async record(entity, id) {
      reads.push(`${entity}/${id}`);
      if (id === "secret") throw new Error("403 SVC.AUTH.FORBIDDEN");
      const row = records[id];
      return row ? { row: { ...row }, fields: memberFields } : null;
    },
    async list(entity, params) {
      reads.push(`${entity}?${new URLSearchParams(params)}`);
      const rows = Object.values(records).filter((r) => Object.entries(params).every(([k, v]) => String(r[k]) === v));
      return { rows, fields: memberFields };
    },
    async call(module, service, action, params) {
      reads.push(`${module}.${service}.${action}`);
      if (action === "broken") throw new Error("501 SVC.ACTION.NOT_IMPLEMENTED");
      return { echoed: params };
    },
  };
  return { loader, reads };
}

const env: Env = { session: { username: "ada", roles: ["librarian"] }, route: { id: "m1", tab: "books" } };
const ada = { id: "m1", full_name: "Ada Lovelace", card: "M-1", fines: "2.50", joined: "2026-01-02", version: 1 };

describe("templates", () => {
  const scope = { context: { member: ada, books: [{ t: "A" }, { t: "B" }], none: null }, session: env.session, route: env.route };
  it("fills context, session and route references and leaves other braces alone", () => {
    expect(fill("{context.member.full_name} ({context.member.card}) for {session.username} on {route.tab}", scope))
      .toBe("Ada Lovelace (M-1) for ada on books");
    expect(fill("Delete {name}? {context.none.x}{context.missing}", scope)).toBe("Delete {name}? ");
    expect(fill("{context.books.1.t}, roles {session.roles}", scope)).toBe("B, roles librarian");
  });
  it("fills every string of nested props", () => {
    expect(fillProps({ title: "{context.member.card}", fields: { Name: "{context.member.full_name}" }, n: 3, list: ["{route.id}"] }, scope))
      .toEqual({ title: "M-1", fields: { Name: "Ada Lovelace" }, n: 3, list: ["m1"] });
  });
  it("shows values as text", () => {
    expect(textOf(null)).toBe("");
    expect(textOf([1, "a", null])).toBe("1, a, ");
    expect(textOf({ a: 1 })).toBe('{"a":1}');
    expect(textOf(false)).toBe("false");
    expect(pick({ a: { b: 0 } }, ["a", "b"])).toBe(0);
    expect(pick("text", ["length"])).toBeNull();
  });
  it("reads ids from the route, templates or literally", () => {
    const s = { context: { member: ada }, session: env.session, route: env.route };
    expect(idOf(":id", s)).toBe("m1");
    expect(idOf(":other", s)).toBeNull();
    expect(idOf("{context.member.id}", s)).toBe("m1");
    expect(idOf("{context.nobody.id}", s)).toBeNull();
    expect(idOf("5b1c", s)).toBe("5b1c");
  });
  it("qualifies entity references by the page's module", () => {
    const decls: ContextDecl[] = [
      { name: "a", source: "entity", entity: "member" },
      { name: "b", source: "entity", entity: "shop.order" },
      { name: "c", source: "entity", entity: "lending/book" },
      { name: "d", source: "const", value: 1 },
    ];
    expect(qualified(decls, "lending").map((d) => d.entity)).toEqual(["lending/member", "shop/order", "lending/book", undefined]);
  });
  it("splits calls", () => {
    expect(callOf("lending.stats.count")).toEqual(["lending", "stats", "count"]);
    expect(callOf("lending/stats.count")).toEqual(["lending", "stats", "count"]);
    expect(callOf("lending.stats")).toBeNull();
    expect(callOf("Lending.stats.count")).toBeNull();
  });
  it("converts between JSON and expression values", () => {
    expect(toExpr({ n: 2, d: 2.5, s: "x", l: [true, null] })).toEqual({ n: 2n, d: Dec.parse("2.5"), s: "x", l: [true, null] });
    expect(fromExpr(toExpr({ n: 2, d: 2.5, big: null }))).toEqual({ n: 2, d: "2.5", big: null });
    expect(fromExpr(2n ** 60n)).toBe("1152921504606846976");
  });
});

describe("resolveContexts", () => {
  it("resolves every source in declaration order", async () => {
    const { loader, reads } = store({ m1: ada });
    const decls: ContextDecl[] = [
      { name: "me", source: "session", value: "username" },
      { name: "who", source: "session" },
      { name: "limit", source: "const", value: 3 },
      { name: "member", source: "entity", entity: "lending/member", id: ":id" },
      { name: "again", source: "entity", entity: "lending/member", id: "{context.member.id}" },
      { name: "owed", source: "expr", expr: "member.fines * 2 + limit" },
      { name: "label", source: "expr", expr: 'concat(upper(me), " / ", member.card, " / ", route.tab)' },
      { name: "members", source: "entity", entity: "lending/member", params: { card: "{context.member.card}" } },
      { name: "count", source: "expr", expr: "count(members)" },
      { name: "stats", source: "api", call: "lending.desk.stats", params: { who: "{session.username}", n: 1 } },
    ];
    const r = await resolveContexts(decls, env, loader);
    expect(r.values.me).toBe("ada");
    expect(r.values.who).toEqual({ username: "ada", roles: ["librarian"] });
    expect(r.values.member).toEqual(ada);
    expect(r.values.again).toEqual(ada);
    expect(r.values.owed).toBe("8.00"); // decimal field typed by its metadata: exact
    expect(r.values.label).toBe("ADA / M-1 / books");
    expect(r.values.members).toEqual([ada]);
    expect(r.values.count).toBe(1);
    expect(r.values.stats).toEqual({ echoed: { who: "ada", n: 1 } });
    expect(r.problems).toEqual({});
    expect(r.targets).toEqual([]);
    expect(reads).toEqual(["lending/member/m1", "lending/member/m1", "lending/member?card=M-1", "lending.desk.stats"]);
  });

  it("falls back when the source yields nothing or fails, and reports failures without a fallback", async () => {
    const { loader } = store({ m1: ada });
    const decls: ContextDecl[] = [
      { name: "gone", source: "entity", entity: "lending/member", id: "m9", fallback: { full_name: "nobody" } },
      { name: "hidden", source: "entity", entity: "lending/member", id: "secret", fallback: { full_name: "a member" } },
      { name: "refused", source: "entity", entity: "lending/member", id: "secret" },
      { name: "noid", source: "entity", entity: "lending/member", id: ":other", fallback: "none" },
      { name: "bad", source: "expr", expr: "1 +", fallback: 0 },
      { name: "typeerr", source: "expr", expr: "hidden.full_name + 1" },
      { name: "null", source: "session", value: "email", fallback: "anonymous" },
      { name: "broken", source: "api", call: "lending.desk.broken" },
      { name: "nocall", source: "api" },
      { name: "conf", source: "const", config: "desk.greeting", fallback: "hi" },
      { name: "conf2", source: "const", config: "desk.greeting" },
      { name: "uses", source: "expr", expr: "concat(hidden.full_name, '!')" },
    ];
    const r = await resolveContexts(decls, env, loader);
    expect(r.values.gone).toEqual({ full_name: "nobody" });
    expect(r.values.hidden).toEqual({ full_name: "a member" }); // nothing of the refused record
    expect(r.values.refused).toBeNull();
    expect(r.values.noid).toBe("none");
    expect(r.values.bad).toBe(0);
    expect(r.values.null).toBe("anonymous");
    expect(r.values.conf).toBe("hi");
    expect(r.values.uses).toBe("a member!");
    expect(Object.keys(r.problems).sort()).toEqual(["broken", "conf2", "nocall", "refused", "typeerr"]);
    expect(r.problems.refused).toContain("403");
    expect(r.problems.conf2).toContain("not served to the UI");
  });

  it("lists realtime targets and re-reads only the context an event forgets", async () => {
    const records: Record<string, Row> = { m1: { ...ada } };
    const { loader, reads } = store(records);
    const decls: ContextDecl[] = [
      { name: "live", source: "entity", entity: "lending/member", id: ":id", realtime: true },
      { name: "opened", source: "entity", entity: "lending/member", id: ":id" },
      { name: "all", source: "entity", entity: "lending/member", realtime: true },
      { name: "shout", source: "expr", expr: "upper(live.full_name)" },
    ];
    const memo: Memo = new Map();
    const first = await resolveContexts(decls, env, loader, memo);
    expect(first.targets).toEqual([
      { name: "live", entity: "lending/member", record: "m1" },
      { name: "all", entity: "lending/member", record: null },
    ]);
    expect(reads).toHaveLength(3);

    records.m1 = { ...ada, full_name: "Ada King", version: 2 }; // another client's write
    const unchanged = await resolveContexts(decls, env, loader, memo);
    expect(unchanged.values.live).toEqual(ada); // nothing forgotten: nothing read
    expect(reads).toHaveLength(3);

    forget(memo, "live");
    const after = await resolveContexts(decls, env, loader, memo);
    expect((after.values.live as Row).full_name).toBe("Ada King");
    expect(after.values.shout).toBe("ADA KING"); // what depends on it follows
    expect((after.values.opened as Row).full_name).toBe("Ada Lovelace"); // not realtime: as opened
    expect(reads).toEqual(["lending/member/m1", "lending/member/m1", "lending/member?", "lending/member/m1"]);
  });

  it("a read forgotten while in flight is not kept: the next resolution reads again", async () => {
    const records: Record<string, Row> = { m1: { ...ada } };
    const { loader, reads } = store(records);
    const decls: ContextDecl[] = [{ name: "live", source: "entity", entity: "lending/member", id: ":id", realtime: true }];
    const memo: Memo = new Map();
    const early = resolveContexts(decls, env, loader, memo); // its read is under way
    forget(memo, "live"); // an event arrives before it answers
    records.m1 = { ...ada, full_name: "Ada King" };
    expect(((await early).values.live as Row).full_name).toBe("Ada Lovelace");
    const late = await resolveContexts(decls, env, loader, memo); // the early answer was not kept
    expect((late.values.live as Row).full_name).toBe("Ada King");
    expect(reads).toHaveLength(2);
  });

  it("a failed read is remembered too (no retry storm), and forgotten like any other", async () => {
    const { loader, reads } = store({});
    const decls: ContextDecl[] = [{ name: "x", source: "entity", entity: "lending/member", id: "secret", realtime: true, fallback: "?" }];
    const memo: Memo = new Map();
    expect((await resolveContexts(decls, env, loader, memo)).values.x).toBe("?");
    await resolveContexts(decls, env, loader, memo);
    expect(reads).toHaveLength(1);
    forget(memo, "x");
    await resolveContexts(decls, env, loader, memo);
    expect(reads).toHaveLength(2);
  });
});
