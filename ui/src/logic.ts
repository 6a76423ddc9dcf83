// Pure view logic (unit-tested by vitest): typed expression contexts, live field states, the
// buttons a record offers, list queries from filters, value formatting.
import { DateV, Dec, type Value, evaluate, evaluateCondition } from "./expr";
import { divRound } from "./expr/values";
import type { ActionMeta, EntityMeta, FieldMeta, FilterSpec, FormComp, Me, Row } from "./meta";

const NUMERIC = new Set(["decimal", "money", "percent"]);

/** An API value as the expression language sees it (decimals exact, dates as dates). */
export function toValue(field: FieldMeta | undefined, raw: unknown): Value {
  if (raw === null || raw === undefined || raw === "") return null;
  const type = field?.type;
  try {
    if (type && NUMERIC.has(type)) return Dec.parse(String(raw));
    if (type === "integer") return BigInt(String(raw));
    if (type === "number") return Dec.parse(String(raw));
    if (type === "date") return DateV.parse(String(raw));
  } catch {
    return null; // half-typed input: unknown, as the server's None
  }
  if (type === "child" && Array.isArray(raw)) {
    const fields = field?.child?.fields ?? [];
    return raw.map((row) => contextOf(fields, row as Row));
  }
  if (typeof raw === "number") return Number.isInteger(raw) ? BigInt(raw) : Dec.parse(String(raw));
  if (typeof raw === "boolean" || typeof raw === "string") return raw;
  if (Array.isArray(raw)) return raw.map((x) => toValue(undefined, x));
  return null;
}

export function contextOf(fields: FieldMeta[], record: Row): { [key: string]: Value } {
  const byName = new Map(fields.map((f) => [f.name, f]));
  const out: { [key: string]: Value } = {};
  for (const [key, raw] of Object.entries(record)) out[key] = toValue(byName.get(key), raw);
  return out;
}

/** A rule that fails to evaluate counts as false, as an unknown value does. */
export function holds(rule: string | undefined, context: { [key: string]: Value }): boolean {
  if (!rule) return false;
  try {
    return evaluateCondition(rule, context);
  } catch {
    return false;
  }
}

export type FieldState = { visible: boolean; readonly: boolean; required: boolean };

export function fieldState(
  field: FieldMeta,
  context: { [key: string]: Value },
  opts: { creating: boolean; editable: boolean; formReadonly?: boolean; hidden?: boolean },
): FieldState {
  const visible = !opts.hidden && (!field.visible_when || holds(field.visible_when, context));
  const readonly =
    !opts.editable ||
    field.read_only ||
    !!field.computed ||
    !!opts.formReadonly ||
    (field.immutable && !opts.creating) ||
    holds(field.readonly_when, context);
  const required = !readonly && (field.required || holds(field.required_when, context));
  return { visible, readonly, required };
}

export type Button = {
  action: string;
  label: string;
  style: string;
  confirm: string | null;
  kind: "submit" | "cancel" | "delete" | "custom";
};

const titleCase = (s: string) => s.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase());

/** Fields the caller may see: the server leaves out those whose permission it lacks. */
export function visibleFields(fields: FieldMeta[], me: Me): FieldMeta[] {
  return fields.filter((f) => permitted(me, f.required_permission));
}

export function permitted(me: Me, permission: string | null | undefined): boolean {
  if (!permission) return true;
  if (me.roles.includes("admin")) return true;
  return me.permissions[permission] === true;
}

function conditionsHold(action: ActionMeta | undefined, context: { [key: string]: Value }): boolean {
  return (action?.conditions ?? []).every((c) => {
    const rule = c.script ?? c.expression;
    return !rule || holds(rule, context);
  });
}

/**
 * The actions a stored record offers this caller: exactly those the API would answer 2xx —
 * exposed, allowed from the record's document state and machine state, permitted, runnable by
 * this server and with every condition true. The server still decides; this hides the rest.
 */
export function buttonsFor(meta: EntityMeta, record: Row, me: Me, form?: FormComp): Button[] {
  const context = contextOf(meta.fields, record);
  const declared = new Map(meta.actions.map((a) => [a.name, a]));
  const draft = !meta.lifecycle || record.docstatus === "draft";
  const candidates: Button["kind"][] = [];
  const out: Button[] = [];
  const push = (name: string, kind: Button["kind"]) => {
    const a = declared.get(name);
    const custom = form?.actions.find((x) => x.action === name);
    out.push({
      action: name,
      label: custom?.label ?? a?.ui?.button_label ?? titleCase(name),
      style: custom?.style ?? a?.ui?.style ?? (kind === "cancel" || kind === "delete" ? "danger" : "secondary"),
      confirm: custom?.confirm ?? a?.ui?.confirm ?? null,
      kind,
    });
  };
  void candidates;
  const ok = (name: string) => {
    const a = declared.get(name);
    return permitted(me, a?.required_permission) && conditionsHold(a, context) && holdsShow(a, context);
  };
  if (meta.lifecycle && meta.rest.includes("update")) {
    if (record.docstatus === "draft" && ok("submit")) push("submit", "submit");
    if (record.docstatus === "submitted" && ok("cancel")) push("cancel", "cancel");
  }
  const state = meta.state_machine ? String(record[meta.state_machine.field] ?? "") : null;
  const transitions = new Map((meta.state_machine?.transitions ?? []).map((t) => [t.action, t]));
  for (const name of meta.runnable) {
    const t = transitions.get(name);
    if (t && (state === null || !t.from.includes(state))) continue;
    if (ok(name)) push(name, "custom");
  }
  if (meta.rest.includes("delete") && draft && ok("delete")) push("delete", "delete");
  // the form's order first, then the rest in declaration order
  const order = form?.actions.map((a) => a.action) ?? [];
  const rank = (b: Button) => (order.includes(b.action) ? order.indexOf(b.action) : 100);
  return out.sort((a, b) => rank(a) - rank(b));
}

function holdsShow(a: ActionMeta | undefined, context: { [key: string]: Value }): boolean {
  const rule = a?.ui?.show_when;
  return !rule || holds(rule, context);
}

/** May this caller edit the stored record (Save shown)? */
export function canEdit(meta: EntityMeta, record: Row | null, me: Me): boolean {
  if (record === null) return meta.rest.includes("create") && permitted(me, actionPermission(meta, "create"));
  const draft = !meta.lifecycle || record.docstatus === "draft";
  return draft && meta.rest.includes("update") && permitted(me, actionPermission(meta, "update"));
}

function actionPermission(meta: EntityMeta, name: string): string | null {
  return meta.actions.find((a) => a.name === name)?.required_permission ?? null;
}

/** "today" and ISO dates in filter defaults. */
export function filterDefault(spec: FilterSpec, today: string): string {
  const value = spec.default ?? "";
  if (value === "today") return today;
  return String(value);
}

export type FilterValues = Record<string, string>;

/** The list query of a table: user filters (an empty value is "all"), sort, page. */
export function listQuery(
  filters: FilterSpec[],
  values: FilterValues,
  opts: { sort?: string; offset: number; limit: number; fields?: string[]; fixed?: Record<string, string> },
): string {
  const q = new URLSearchParams(opts.fixed);
  for (const f of filters) {
    const type = f.type ?? "text";
    if (type === "date_range") {
      const from = values[`${f.field}.from`] ?? "";
      const to = values[`${f.field}.to`] ?? "";
      if (from && to) q.append(`${f.field}[between]`, `${from},${to}`);
      else if (from) q.append(`${f.field}[gte]`, from);
      else if (to) q.append(`${f.field}[lte]`, to);
      continue;
    }
    const value = values[f.field] ?? "";
    if (!value) continue;
    if (type === "text") q.append(`${f.field}[ilike]`, `%${value.replace(/[%_\\]/g, (c) => `\\${c}`)}%`);
    else if (f.op && f.op !== "eq") q.append(`${f.field}[${f.op}]`, value);
    else q.append(f.field, value);
  }
  if (opts.sort) q.set("sort", opts.sort);
  q.set("limit", String(opts.limit));
  q.set("offset", String(opts.offset));
  q.set("count", "true");
  if (opts.fields?.length) q.set("fields", opts.fields.join(","));
  return q.toString();
}

/** Clicking a column: ascending, then descending, then the table's default. */
export function nextSort(current: string | undefined, field: string, fallback: string | undefined): string | undefined {
  if (current === field) return `-${field}`;
  if (current === `-${field}`) return fallback;
  return field;
}

const money = new Map<string, Intl.NumberFormat>();

export function formatValue(field: FieldMeta | undefined, value: unknown, labels?: Map<string, string>): string {
  if (value === null || value === undefined) return "";
  if (field?.masked && value === "****") return "••••";
  if (field?.options) {
    const o = field.options.find((x) => x.value === value);
    if (o) return o.label;
  }
  if (field?.type === "relation" && labels?.has(String(value))) return labels.get(String(value)) ?? "";
  if (field?.type === "money" && field.currency) {
    const key = `${field.currency}/${field.scale ?? 2}`;
    let f = money.get(key);
    if (!f) {
      f = new Intl.NumberFormat("en", { style: "currency", currency: field.currency, minimumFractionDigits: field.scale ?? 2 });
      money.set(key, f);
    }
    return f.format(Number(value));
  }
  if (field?.type === "boolean") return value ? "Yes" : "No";
  if (field?.type === "file") return value ? "Attached" : "";
  if (field?.type === "child" && Array.isArray(value)) return `${value.length} row(s)`;
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** The value a new record's field starts with: the form's default_from, else the field default. */
export function initialValue(field: FieldMeta, defaultFrom: string | undefined, session: Record<string, string>): unknown {
  const match = defaultFrom ? /^\{session\.([a-z_][a-z0-9_]*)\}$/.exec(defaultFrom) : null;
  if (match) return session[match[1]] ?? null;
  if (field.type === "child") return [];
  return field.default ?? null;
}

/** Problem ``errors`` keyed by path (``lines[1].qty`` stays as it is). */
export function problemsByPath(errors: { path: string; message: string }[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of errors) out.set(e.path, out.has(e.path) ? `${out.get(e.path)}; ${e.message}` : e.message);
  return out;
}

/** Move a row of a child table up or down; renumbers the sequence field 1..n. */
export function moveRow(rows: Row[], index: number, delta: number, sequence: string | null): Row[] {
  const target = index + delta;
  if (target < 0 || target >= rows.length) return rows;
  const next = rows.slice();
  [next[index], next[target]] = [next[target], next[index]];
  return sequence ? next.map((r, i) => ({ ...r, [sequence]: i + 1 })) : next;
}

/** The values sent on create/update: read-only and computed fields left out, blanks as null. */
export function payloadOf(fields: FieldMeta[], values: Row, opts: { creating: boolean; original?: Row }): Row {
  const out: Row = {};
  for (const f of fields) {
    if (f.read_only || f.computed || f.type === "file" || !(f.name in values)) continue; // files: their own API
    if (!opts.creating && f.immutable) continue;
    let v = values[f.name];
    if (v === "") v = null;
    if (f.masked && v === "****") continue;
    if (f.type === "child" && Array.isArray(v)) v = v.map((row) => payloadOf(f.child?.fields ?? [], row as Row, { creating: true }));
    if (!opts.creating && opts.original && JSON.stringify(opts.original[f.name] ?? null) === JSON.stringify(v)) continue;
    if (opts.creating && v === null) continue;
    out[f.name] = v;
  }
  return out;
}

/** A computed value as the API would show it: exact, rounded half up to the field's scale. */
function shownNumber(field: FieldMeta, value: Value): unknown {
  if (value === null) return null;
  if (typeof value === "bigint") return field.scale ? new Dec(value * 10n ** BigInt(field.scale), field.scale).toString() : Number(value);
  if (value instanceof Dec) {
    const scale = field.scale ?? value.e;
    const d = value.e > scale ? new Dec(divRound(value.m, 10n ** BigInt(value.e - scale), "up"), scale) : new Dec(value.m * 10n ** BigInt(scale - value.e), scale);
    return d.toString();
  }
  return typeof value === "string" || typeof value === "boolean" ? value : null;
}

/**
 * Computed fields evaluated live, as the server will on save: child rows' formulas first, then the
 * record's (which may aggregate rows). A formula that cannot be evaluated yet leaves the value.
 */
export function computeLive(fields: FieldMeta[], values: Row): Row {
  const out: Row = { ...values };
  for (const f of fields) {
    if (f.type !== "child" || !f.child || !Array.isArray(out[f.name])) continue;
    const cf = f.child.fields.filter((c) => c.computed);
    if (!cf.length) continue;
    out[f.name] = (out[f.name] as Row[]).map((row) => {
      const next = { ...row };
      for (const c of cf) {
        try {
          next[c.name] = shownNumber(c, evaluate(c.computed?.formula ?? "", contextOf(f.child?.fields ?? [], next)));
        } catch {
          /* left as it is */
        }
      }
      return next;
    });
  }
  for (const f of fields) {
    if (!f.computed || f.type === "child") continue;
    try {
      out[f.name] = shownNumber(f, evaluate(f.computed.formula, contextOf(fields, out)));
    } catch {
      /* left as it is */
    }
  }
  return out;
}

/** ``Delete {name}?`` with the record's values. */
export function interpolate(text: string, record: Row): string {
  return text.replace(/\{([a-z_][a-z0-9_]*)\}/g, (_, k: string) => String(record[k] ?? ""));
}
