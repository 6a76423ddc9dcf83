// Values of manifest expressions, as dap.config.expressions.values defines them: integers (bigint),
// exact decimals (Dec), strings, booleans, null, plain dates (DateV), lists and records.

export class Dec {
  // value = m × 10^-e
  constructor(readonly m: bigint, readonly e: number) {}
  static parse(text: string): Dec {
    const match = /^(-?)(\d*)(?:\.(\d+))?$/.exec(text.trim());
    if (!match || (match[2] === "" && !match[3])) throw new EvalError(`not a decimal: ${text}`);
    const frac = match[3] ?? "";
    const m = BigInt((match[2] || "0") + frac);
    return new Dec(match[1] ? -m : m, frac.length);
  }
  toString(): string {
    const neg = this.m < 0n;
    let digits = (neg ? -this.m : this.m).toString();
    if (this.e <= 0) return (neg ? "-" : "") + digits + "0".repeat(-this.e);
    digits = digits.padStart(this.e + 1, "0");
    return `${neg ? "-" : ""}${digits.slice(0, -this.e)}.${digits.slice(-this.e)}`;
  }
  /** Trailing zeros stripped (Python's ``normalize`` with a plain, never exponent, text). */
  normal(): string {
    let { m, e } = this;
    while (e > 0 && m % 10n === 0n) {
      m /= 10n;
      e -= 1;
    }
    return new Dec(m, e).toString();
  }
}

export class DateV {
  // a plain date as days since 1970-01-01 (UTC calendar)
  constructor(readonly days: number) {}
  static parse(text: string): DateV {
    const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
    if (!match) throw new EvalError(`not a date: ${text}`);
    return new DateV(Date.UTC(+match[1], +match[2] - 1, +match[3]) / 86_400_000);
  }
  static today(): DateV {
    const now = new Date();
    return new DateV(Date.UTC(now.getFullYear(), now.getMonth(), now.getDate()) / 86_400_000);
  }
  toString(): string {
    return new Date(this.days * 86_400_000).toISOString().slice(0, 10);
  }
}

export type Value = null | boolean | bigint | Dec | string | DateV | Value[] | { [key: string]: Value };

export class ExprError extends Error {
  constructor(message: string, readonly position: number | null = null) {
    super(position === null ? message : `${message} at column ${position + 1}`);
  }
}
export class EvalError extends ExprError {}
export class SyntaxErr extends ExprError {}

export function isNumber(v: Value): v is bigint | Dec {
  return typeof v === "bigint" || v instanceof Dec;
}

export function isRecord(v: Value): v is { [key: string]: Value } {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Dec) && !(v instanceof DateV);
}

export function typeName(v: Value): string {
  if (v === null) return "null";
  if (typeof v === "boolean") return "boolean";
  if (typeof v === "bigint") return "integer";
  if (v instanceof Dec) return "decimal";
  if (typeof v === "string") return "string";
  if (v instanceof DateV) return "date";
  if (Array.isArray(v)) return "list";
  return "record";
}

export function typeError(position: number, what: string, ...values: Value[]): EvalError {
  return new EvalError(`${what} ${values.map(typeName).join(" and ")}`, position);
}

export function truth(v: Value, user: string, position: number): boolean {
  if (v === null) return false;
  if (typeof v === "boolean") return v;
  throw new EvalError(`${user} expects true, false or null, got ${typeName(v)}`, position);
}

export function toDec(v: bigint | Dec): Dec {
  return typeof v === "bigint" ? new Dec(v, 0) : v;
}

function align(a: Dec, b: Dec): [bigint, bigint, number] {
  const e = Math.max(a.e, b.e);
  return [a.m * 10n ** BigInt(e - a.e), b.m * 10n ** BigInt(e - b.e), e];
}

export function compareNumbers(a: bigint | Dec, b: bigint | Dec): number {
  const [x, y] = align(toDec(a), toDec(b));
  return x < y ? -1 : x > y ? 1 : 0;
}

const PRECISION = 34;

function digitsOf(n: bigint): number {
  return (n < 0n ? -n : n).toString().length;
}

/** Round half even to at most 34 significant digits, as Python's decimal context does. */
function fit(d: Dec): Dec {
  const extra = digitsOf(d.m) - PRECISION;
  if (extra <= 0 || d.e - extra < -1000) return d;
  return new Dec(divRound(d.m, 10n ** BigInt(extra), "even"), d.e - extra);
}

export function divRound(n: bigint, d: bigint, mode: "even" | "up"): bigint {
  if (d < 0n) {
    n = -n;
    d = -d;
  }
  const neg = n < 0n;
  const a = neg ? -n : n;
  let q = a / d;
  const r2 = (a % d) * 2n;
  if (r2 > d || (r2 === d && (mode === "up" || q % 2n === 1n))) q += 1n;
  return neg ? -q : q;
}

export function numbers(op: string, a: bigint | Dec, b: bigint | Dec, position: number): bigint | Dec {
  const zero = typeof b === "bigint" ? b === 0n : b.m === 0n;
  if ((op === "/" || op === "%") && zero) throw new EvalError(`division by zero in '${op}'`, position);
  if (typeof a === "bigint" && typeof b === "bigint" && op !== "/") {
    if (op === "+") return a + b;
    if (op === "-") return a - b;
    if (op === "*") return a * b;
    const r = a % b; // Python's % takes the sign of the divisor
    return r !== 0n && r < 0n !== b < 0n ? r + b : r;
  }
  const x = toDec(a);
  const y = toDec(b);
  if (op === "+" || op === "-") {
    const [p, q, e] = align(x, y);
    return fit(new Dec(op === "+" ? p + q : p - q, e));
  }
  if (op === "*") return fit(new Dec(x.m * y.m, x.e + y.e));
  if (op === "/") return divide(x, y);
  const [p, q, e] = align(x, y);
  let r = p % q; // sign of the dividend (Decimal.remainder), then Python's rule
  if (r !== 0n && r < 0n !== q < 0n) r += q;
  return new Dec(r, e);
}

function divide(x: Dec, y: Dec): Dec {
  const ideal = x.e - y.e;
  // x/y = (x.m × 10^y.e) / (y.m × 10^x.e); scale the numerator so the quotient has 34+ digits
  let num = x.m;
  let den = y.m;
  let e = ideal;
  const shift = Math.max(0, PRECISION + digitsOf(den) - digitsOf(num) + 1);
  num *= 10n ** BigInt(shift);
  e += shift;
  const exact = num % den === 0n;
  let q = exact ? num / den : divRound(num, den, "even");
  let result = fit(new Dec(q, e));
  if (exact) {
    q = result.m;
    e = result.e;
    while (e > ideal && q % 10n === 0n) {
      q /= 10n;
      e -= 1;
    }
    result = new Dec(q, e);
  }
  return result;
}

export function equal(a: Value, b: Value): boolean {
  if (a === null || b === null) return a === null && b === null;
  if (typeof a === "boolean" || typeof b === "boolean") return a === b;
  if (isNumber(a) && isNumber(b)) return compareNumbers(a, b) === 0;
  if (a instanceof DateV && b instanceof DateV) return a.days === b.days;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && equal(a[k], b[k]));
  }
  return a === b;
}

export function less(a: Value, b: Value, position: number, op: string): boolean {
  if (isNumber(a) && isNumber(b)) return compareNumbers(a, b) < 0;
  if (typeof a === "string" && typeof b === "string") return a < b;
  if (a instanceof DateV && b instanceof DateV) return a.days < b.days;
  throw typeError(position, `cannot compare with '${op}':`, a, b);
}

export function days(v: Value): number | null {
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Dec) {
    const n = v.normal();
    return /^-?\d+$/.test(n) ? Number(n) : null;
  }
  return null;
}

export function arithmetic(op: string, a: Value, b: Value, position: number): Value {
  if (a === null || b === null) return null;
  if (isNumber(a) && isNumber(b)) return numbers(op, a, b, position);
  if (op === "+" && typeof a === "string" && typeof b === "string") return a + b;
  if ((op === "+" || op === "-") && a instanceof DateV && days(b) !== null) {
    const n = days(b) ?? 0;
    return new DateV(op === "+" ? a.days + n : a.days - n);
  }
  if (op === "+" && days(a) !== null && b instanceof DateV) return new DateV(b.days + (days(a) ?? 0));
  if (op === "-" && a instanceof DateV && b instanceof DateV) return BigInt(a.days - b.days);
  throw typeError(position, `cannot apply '${op}' to`, a, b);
}

export function member(needle: Value, haystack: Value, position: number, op: string): boolean {
  if (haystack === null) return false;
  if (Array.isArray(haystack)) return haystack.some((item) => equal(needle, item));
  if (typeof haystack === "string" && (needle === null || typeof needle === "string"))
    return needle !== null && haystack.includes(needle);
  throw typeError(position, `'${op}' needs a list or a string on the right; got`, needle, haystack);
}
