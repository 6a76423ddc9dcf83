// Evaluating manifest expressions on a record: a port of dap.config.expressions.evaluating, so that
// a form shows visible_when / readonly_when / required_when as the server decides them.
import { type Node, parse } from "./parse";
import {
  DateV, Dec, EvalError, type Value, arithmetic, divRound, equal, isNumber, isRecord, less, member,
  numbers, toDec, truth, typeError, typeName,
} from "./values";

export type Context = { [key: string]: Value };
export type Clock = { today?: DateV };

export function evaluate(source: string | Node, context: Context, clock: Clock = {}): Value {
  const root = typeof source === "string" ? parse(source) : source;
  return walk(root, context, clock);
}

/** A *_when rule or a condition: true or false, with null (unknown) counting as false. */
export function evaluateCondition(source: string, context: Context, clock: Clock = {}): boolean {
  const root = parse(source);
  return truth(walk(root, context, clock), "a condition", root.pos);
}

function walk(node: Node, ctx: Context, clock: Clock): Value {
  switch (node.k) {
    case "const":
      return node.v;
    case "name":
      return resolve(ctx, node.parts, 0, node.pos);
    case "bin": {
      if (node.op === "and") {
        if (!truth(walk(node.l, ctx, clock), "'and'", node.pos)) return false;
        return truth(walk(node.r, ctx, clock), "'and'", node.pos);
      }
      if (node.op === "or") {
        if (truth(walk(node.l, ctx, clock), "'or'", node.pos)) return true;
        return truth(walk(node.r, ctx, clock), "'or'", node.pos);
      }
      const l = walk(node.l, ctx, clock);
      const r = walk(node.r, ctx, clock);
      switch (node.op) {
        case "==": return equal(l, r);
        case "!=": return !equal(l, r);
        case "in": return member(l, r, node.pos, "in");
        case "not in": return !member(l, r, node.pos, "not in");
        case "<": return l !== null && r !== null && less(l, r, node.pos, "<");
        case ">": return l !== null && r !== null && less(r, l, node.pos, ">");
        case "<=": return l !== null && r !== null && !less(r, l, node.pos, "<=");
        case ">=": return l !== null && r !== null && !less(l, r, node.pos, ">=");
        default: return arithmetic(node.op, l, r, node.pos);
      }
    }
    case "un": {
      if (node.op === "not") return !truth(walk(node.x, ctx, clock), "'not'", node.pos);
      const v = walk(node.x, ctx, clock);
      if (v === null) return null;
      if (typeof v === "bigint") return -v;
      if (v instanceof Dec) return new Dec(-v.m, v.e);
      throw typeError(node.pos, "cannot negate", v);
    }
    case "list":
      return node.items.map((item) => walk(item, ctx, clock));
    case "call":
      return CALLS[node.fn](node, ctx, clock);
  }
}

function resolve(value: Value, parts: string[], start: number, pos: number): Value {
  for (let i = start; i < parts.length; i += 1) {
    if (value === null || value === undefined) return null;
    if (Array.isArray(value)) return value.map((row) => resolve(row, parts, i, pos));
    if (isRecord(value)) value = value[parts[i]] ?? null;
    else throw typeError(pos, `cannot read '${parts[i]}' of '${parts.slice(0, i).join(".")}'`, value);
  }
  return value ?? null;
}

type Call = Extract<Node, { k: "call" }>;
const args = (n: Call, ctx: Context, clock: Clock) => n.args.map((a) => walk(a, ctx, clock));

function round(n: Call, ctx: Context, clock: Clock): Value {
  const [value, places = 0n] = args(n, ctx, clock);
  if (value === null || places === null) return null;
  if (!isNumber(value)) throw typeError(n.pos, "round() expects a number, got", value);
  const digits = typeof places === "bigint" ? Number(places) : places instanceof Dec && /^-?\d+$/.test(places.normal()) ? Number(places.normal()) : null;
  if (digits === null || Math.abs(digits) > 34)
    throw new EvalError(`round() expects a whole number of places from -34 to 34, got ${String(places)}`, n.pos);
  if (typeof value === "bigint" && digits >= 0) return value;
  const d = toDec(value);
  let m: bigint;
  if (d.e > digits) m = divRound(d.m, 10n ** BigInt(d.e - digits), "up");
  else m = d.m * 10n ** BigInt(digits - d.e);
  if (digits < 0) {
    const whole = m * 10n ** BigInt(-digits);
    return typeof value === "bigint" ? whole : new Dec(whole, 0);
  }
  return typeof value === "bigint" ? m : new Dec(m, digits);
}

function extreme(n: Call, ctx: Context, clock: Clock): Value {
  let values = args(n, ctx, clock);
  if (values.length === 1 && Array.isArray(values[0])) values = values[0];
  let best: Value = null;
  for (const v of values) {
    if (v === null) continue;
    if (best === null) {
      less(v, v, n.pos, `${n.fn}()`);
      best = v;
    } else if (n.fn === "max" ? less(best, v, n.pos, "max()") : less(v, best, n.pos, "min()")) best = v;
  }
  return best;
}

function text(v: Value, pos: number): string {
  if (v === null) return "";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "string" || typeof v === "bigint") return String(v);
  if (v instanceof Dec || v instanceof DateV) return v.toString();
  throw typeError(pos, "concat() cannot turn into text a", v);
}

const CALLS: Record<string, (n: Call, ctx: Context, clock: Clock) => Value> = {
  abs(n, ctx, clock) {
    const v = walk(n.args[0], ctx, clock);
    if (v === null) return null;
    if (typeof v === "bigint") return v < 0n ? -v : v;
    if (v instanceof Dec) return new Dec(v.m < 0n ? -v.m : v.m, v.e);
    throw typeError(n.pos, "abs() expects a number, got", v);
  },
  coalesce(n, ctx, clock) {
    for (const a of n.args) {
      const v = walk(a, ctx, clock);
      if (v !== null) return v;
    }
    return null;
  },
  concat: (n, ctx, clock) => args(n, ctx, clock).map((v) => text(v, n.pos)).join(""),
  count(n, ctx, clock) {
    const v = walk(n.args[0], ctx, clock);
    if (v === null) return 0n;
    if (!Array.isArray(v)) throw typeError(n.pos, "count() expects a list such as count(lines), got", v);
    return BigInt(v.filter((x) => x !== null).length);
  },
  if(n, ctx, clock) {
    const c = truth(walk(n.args[0], ctx, clock), "if()", n.pos);
    return walk(n.args[c ? 1 : 2], ctx, clock);
  },
  len(n, ctx, clock) {
    const v = walk(n.args[0], ctx, clock);
    if (v === null) return null;
    if (typeof v === "string") return BigInt([...v].length);
    if (Array.isArray(v)) return BigInt(v.length);
    throw typeError(n.pos, "len() expects a string or a list, got", v);
  },
  lower: (n, ctx, clock) => caseOf(n, ctx, clock, (s) => s.toLowerCase()),
  upper: (n, ctx, clock) => caseOf(n, ctx, clock, (s) => s.toUpperCase()),
  max: extreme,
  min: extreme,
  now() {
    throw new EvalError("now() is evaluated by the server only", null);
  },
  round,
  sum(n, ctx, clock) {
    const v = walk(n.args[0], ctx, clock);
    if (v === null) return 0n;
    if (!Array.isArray(v)) throw typeError(n.pos, "sum() expects a list such as sum(lines.amount), got", v);
    let total: bigint | Dec = 0n;
    for (const x of v) {
      if (x === null) continue;
      if (!isNumber(x)) throw typeError(n.pos, "sum() expects numbers, got", x);
      total = numbers("+", total, x, n.pos);
    }
    return total;
  },
  today: (_n, _ctx, clock) => clock.today ?? DateV.today(),
};

function caseOf(n: Call, ctx: Context, clock: Clock, f: (s: string) => string): Value {
  const v = walk(n.args[0], ctx, clock);
  if (v === null) return null;
  if (typeof v === "string") return f(v);
  throw typeError(n.pos, `${n.fn}() expects a string, got`, v);
}

export { typeName };
