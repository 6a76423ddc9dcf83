// Page contexts (ContextDecl): named values a page resolves when it opens, from the session, a
// constant, a record or list of an entity (the REST API, the caller's permissions), a service
// action, or an expression over the contexts before it. Pure: the I/O comes in as a ``Loader``,
// so vitest runs it without a server; ``views/page.ts`` is the thin shell (fetching, the live
// socket for ``realtime: true``). Blocks use the values through ``{context.<name>.<path>}``
// templates in their ``props`` (docs/ui.md "Page contexts").
import { DateV, Dec, type Value, evaluate } from "./expr";
import { contextOf } from "./logic";
import type { ContextDecl, FieldMeta, Row } from "./meta";

// declared with the other metadata shapes (meta.ts imports nothing); named here too, where it is used
export type { ContextDecl };

/** What a page knows before any context: who is signed in, and its route (``id`` and the query). */
export type Env = { session: { username: string; roles: string[] }; route: Record<string, string> };

/** The I/O a resolution needs; ``record`` answers null for a record that does not exist. */
export type Loader = {
  record(entity: string, id: string): Promise<{ row: Row; fields: FieldMeta[] } | null>;
  list(entity: string, params: Record<string, string>): Promise<{ rows: Row[]; fields: FieldMeta[] }>;
  call(module: string, service: string, action: string, params: Record<string, unknown>): Promise<unknown>;
};

/** A realtime context's subscription: the entity, and the record when the context is one record. */
export type Target = { name: string; entity: string; record: string | null };

export type Resolved = {
  /** Each context's value as JSON (what templates show). */
  values: Record<string, unknown>;
  /** Each context's value as the expression language sees it (decimals exact, dates as dates). */
  typed: Record<string, Value>;
  /** Contexts that failed and had no ``fallback``: the reason, shown on the page. */
  problems: Record<string, string>;
  /** What the realtime contexts listen to. */
  targets: Target[];
};

type Outcome = { ok: true; value: unknown } | { ok: false; error: string };
/** Loaded answers kept across resolutions, by context: a realtime event forgets only its own
 * context's. A read is kept from the moment it starts, so forgetting it while it is in flight
 * also drops what it answers (it may predate the change the event announces). */
export type Memo = Map<string, Promise<Outcome>>;

const REF = /\{(context|session|route)((?:\.[A-Za-z0-9_]+)+)\}/g;

/** The value at ``path`` of ``root`` (``a.b.0.c``); null where a step is missing. */
export function pick(root: unknown, path: string[]): unknown {
  let value = root;
  for (const step of path) {
    if (value === null || value === undefined || typeof value !== "object") return null;
    value = (value as Record<string, unknown>)[step];
  }
  return value ?? null;
}

/** A value as a template shows it: nothing for null, lists comma-separated, records as JSON. */
export function textOf(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.map(textOf).join(", ");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** ``{context.member.full_name}``, ``{session.username}`` and ``{route.id}`` filled in ``text``;
 * other braces stay as written. */
export function fill(text: string, scope: { context: Record<string, unknown>; session: unknown; route: unknown }): string {
  return text.replace(REF, (_, root: "context" | "session" | "route", path: string) => textOf(pick(scope[root], path.slice(1).split("."))));
}

/** Every string of ``props`` (nested in lists and objects too) filled by :func:`fill`. */
export function fillProps<T>(props: T, scope: Parameters<typeof fill>[1]): T {
  if (typeof props === "string") return fill(props, scope) as T;
  if (Array.isArray(props)) return props.map((p) => fillProps(p, scope)) as T;
  if (props && typeof props === "object")
    return Object.fromEntries(Object.entries(props).map(([k, v]) => [k, fillProps(v, scope)])) as T;
  return props;
}

/** The record id of an entity context: ``:id`` (any ``:param``) reads the route, a text with
 * ``{…}`` references is filled, anything else is the id itself; null when it comes out empty. */
export function idOf(id: string, scope: Parameters<typeof fill>[1]): string | null {
  const route = /^:([A-Za-z_][A-Za-z0-9_]*)$/.exec(id);
  const value = route ? textOf(pick(scope.route, [route[1]])) : fill(id, scope);
  return value.trim() === "" ? null : value;
}

/** The page's declarations with each ``entity`` as ``module/name`` (a bare name is the page's
 * module's, as in every manifest reference; ``module.name`` is accepted too). */
export function qualified(decls: ContextDecl[], module: string): ContextDecl[] {
  return decls.map((d) => (d.entity && !d.entity.includes("/") ? { ...d, entity: d.entity.includes(".") ? d.entity.replace(".", "/") : `${module}/${d.entity}` } : d));
}

/** ``module.service.action`` (or ``module/service.action``) split; null when it is neither. */
export function callOf(call: string): [string, string, string] | null {
  const parts = call.replace("/", ".").split(".");
  return parts.length === 3 && parts.every((p) => /^[a-z][a-z0-9_]*$/.test(p)) ? [parts[0], parts[1], parts[2]] : null;
}

/** Any JSON value as the expression language sees it (no field types: numbers by their look). */
export function toExpr(raw: unknown): Value {
  if (raw === null || raw === undefined) return null;
  if (typeof raw === "number") return Number.isInteger(raw) ? BigInt(raw) : Dec.parse(String(raw));
  if (typeof raw === "string" || typeof raw === "boolean") return raw;
  if (Array.isArray(raw)) return raw.map(toExpr);
  if (typeof raw === "object") return Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, toExpr(v)]));
  return null;
}

/** An expression's answer as JSON: whole numbers as numbers (as text beyond 2^53), decimals and
 * dates as their text. */
export function fromExpr(value: Value): unknown {
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
  if (value instanceof Dec || value instanceof DateV) return value.toString();
  if (Array.isArray(value)) return value.map(fromExpr);
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fromExpr(v)]));
  return value;
}

/** Forget what ``name`` loaded, so the next resolution reads it again. */
export function forget(memo: Memo, name: string): void {
  for (const key of [...memo.keys()]) if (key.startsWith(`${name}|`)) memo.delete(key);
}

async function remember(memo: Memo, key: string, load: () => Promise<unknown>): Promise<unknown> {
  let pending = memo.get(key);
  if (!pending) {
    pending = load().then(
      (value): Outcome => ({ ok: true, value }),
      (error: unknown): Outcome => ({ ok: false, error: error instanceof Error ? error.message : String(error) }),
    );
    memo.set(key, pending);
  }
  const outcome = await pending;
  if (!outcome.ok) throw new Error(outcome.error);
  return outcome.value;
}

const stringParams = (params: Record<string, unknown> | undefined, scope: Parameters<typeof fill>[1]) =>
  Object.fromEntries(Object.entries(params ?? {}).map(([k, v]) => [k, typeof v === "string" ? fill(v, scope) : textOf(v)]));

/** Resolve ``decls`` in their order (each sees the contexts declared before it). A source that
 * yields nothing (null, no record, an empty id) or fails gives the context its ``fallback``; a
 * failure without one is reported in ``problems`` and the value is null. */
export async function resolveContexts(decls: ContextDecl[], env: Env, loader: Loader, memo: Memo = new Map()): Promise<Resolved> {
  const out: Resolved = { values: {}, typed: {}, problems: {}, targets: [] };
  const scope = { context: out.values, session: env.session, route: env.route };
  for (const decl of decls) {
    let value: unknown = null;
    let typed: Value | undefined;
    let problem: string | null = null;
    try {
      if (decl.config) throw new Error("config values are not served to the UI yet");
      switch (decl.source) {
        case "const":
          value = decl.value ?? null;
          break;
        case "session":
          value = decl.value === undefined || decl.value === null ? env.session : pick(env.session, String(decl.value).split("."));
          break;
        case "expr": {
          if (!decl.expr) throw new Error("source expr needs an expr");
          const exprScope: { [key: string]: Value } = { session: toExpr(env.session), route: toExpr(env.route), ...out.typed };
          typed = evaluate(decl.expr, exprScope);
          value = fromExpr(typed);
          break;
        }
        case "entity": {
          const entity = decl.entity;
          if (!entity) throw new Error("source entity needs an entity");
          if (decl.id !== undefined && decl.id !== null) {
            const id = idOf(String(decl.id), scope);
            if (decl.realtime && id) out.targets.push({ name: decl.name, entity, record: id });
            if (id) {
              const found = (await remember(memo, `${decl.name}|${entity}|${id}`, () => loader.record(entity, id))) as Awaited<ReturnType<Loader["record"]>>;
              if (found) {
                value = found.row;
                typed = contextOf(found.fields, found.row);
              }
            }
          } else {
            const params = stringParams(decl.params, scope);
            if (decl.realtime) out.targets.push({ name: decl.name, entity, record: null });
            const found = (await remember(memo, `${decl.name}|${entity}|${JSON.stringify(params)}`, () => loader.list(entity, params))) as Awaited<ReturnType<Loader["list"]>>;
            value = found.rows;
            typed = found.rows.map((row) => contextOf(found.fields, row));
          }
          break;
        }
        case "api": {
          const parts = decl.call ? callOf(decl.call) : null;
          if (!parts) throw new Error("source api needs a call: module.service.action");
          const params = Object.fromEntries(Object.entries(decl.params ?? {}).map(([k, v]) => [k, fillProps(v, scope)]));
          value = await remember(memo, `${decl.name}|${decl.call}|${JSON.stringify(params)}`, () => loader.call(...parts, params));
          break;
        }
        default:
          throw new Error(`unknown source ${String((decl as { source: unknown }).source)}`);
      }
    } catch (error) {
      problem = error instanceof Error ? error.message : String(error);
      value = null;
      typed = undefined;
    }
    if (value === null || value === undefined) {
      const fallback = decl.fallback ?? null;
      value = fallback;
      typed = undefined;
      if (problem && fallback === null) out.problems[decl.name] = problem;
    }
    out.values[decl.name] = value;
    out.typed[decl.name] = typed ?? toExpr(value);
  }
  return out;
}
