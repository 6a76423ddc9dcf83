// The syntax of manifest expressions: a port of dap.config.expressions.parsing (tokenizer and Pratt
// parser, same limits, same refusals).
import { Dec, SyntaxErr, type Value } from "./values";

export const MAX_SOURCE_LENGTH = 2000;
export const MAX_DEPTH = 64;
export const FUNCTIONS: Record<string, [number, number | null]> = {
  abs: [1, 1], coalesce: [1, null], concat: [1, null], count: [1, 1], if: [3, 3], len: [1, 1],
  lower: [1, 1], max: [1, null], min: [1, null], now: [0, 0], round: [1, 2], sum: [1, 1],
  today: [0, 0], upper: [1, 1],
};
const KEYWORDS = new Set(["and", "or", "not", "in", "true", "false", "null"]);

export type Node =
  | { k: "const"; v: Value; pos: number }
  | { k: "name"; parts: string[]; pos: number }
  | { k: "bin"; op: string; l: Node; r: Node; pos: number }
  | { k: "un"; op: "-" | "not"; x: Node; pos: number }
  | { k: "list"; items: Node[]; pos: number }
  | { k: "call"; fn: string; args: Node[]; pos: number };

type Token = { kind: "number" | "string" | "name" | "keyword" | "op" | "end"; text: string; pos: number; value?: Value };

const OPERATORS = ["==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "(", ")", "[", "]", ","];
const MISTAKES: [string, string][] = [
  ["&&", "use 'and'"], ["||", "use 'or'"], ["=", "use '==' to compare"], ["!", "use 'not' to negate or '!=' to compare"],
];
const ESCAPES: Record<string, string> = { "\\": "\\", "'": "'", '"': '"', n: "\n", t: "\t", r: "\r" };
const isDigit = (c: string) => c >= "0" && c <= "9";
const isNameStart = (c: string) => c === "_" || /^[A-Za-z]$/.test(c);
const isNameChar = (c: string) => c === "_" || /^[A-Za-z0-9]$/.test(c);

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    const start = i;
    if (" \t\r\n".includes(c)) i += 1;
    else if (isDigit(c)) {
      while (i < src.length && isDigit(src[i])) i += 1;
      const decimal = src[i] === ".";
      if (decimal) {
        i += 1;
        if (i >= src.length || !isDigit(src[i])) throw new SyntaxErr("expected digits after the decimal point", i);
        while (i < src.length && isDigit(src[i])) i += 1;
      }
      if (i < src.length && (isNameChar(src[i]) || src[i] === ".")) throw new SyntaxErr(`unexpected '${src[i]}' after a number`, i);
      const text = src.slice(start, i);
      tokens.push({ kind: "number", text, pos: start, value: decimal ? Dec.parse(text) : BigInt(text) });
    } else if (c === "'" || c === '"') {
      let out = "";
      i += 1;
      for (;;) {
        if (i >= src.length) throw new SyntaxErr(`unterminated string (expected a closing ${c})`, start);
        const ch = src[i];
        if (ch === c) break;
        if (ch === "\\") {
          const code = src.slice(i + 1, i + 2);
          if (code in ESCAPES) {
            out += ESCAPES[code];
            i += 2;
            continue;
          }
          const hex = src.slice(i + 2, i + 6);
          if (code === "u" && /^[0-9a-fA-F]{4}$/.test(hex)) {
            out += String.fromCharCode(parseInt(hex, 16));
            i += 6;
            continue;
          }
          throw new SyntaxErr("invalid escape; expected one of \\\\ \\' \\\" \\n \\t \\r \\uXXXX", i);
        }
        out += ch;
        i += 1;
      }
      i += 1;
      tokens.push({ kind: "string", text: src.slice(start, i), pos: start, value: out });
    } else if (isNameStart(c)) {
      for (;;) {
        while (i < src.length && isNameChar(src[i])) i += 1;
        if (src[i] === ".") {
          if (i + 1 < src.length && isNameStart(src[i + 1])) {
            i += 1;
            continue;
          }
          throw new SyntaxErr("expected a field name after '.'", i + 1);
        }
        break;
      }
      const text = src.slice(start, i);
      tokens.push({ kind: KEYWORDS.has(text) ? "keyword" : "name", text, pos: start });
    } else {
      for (const [mistake, hint] of MISTAKES)
        if (src.startsWith(mistake, i) && !src.startsWith(mistake + "=", i))
          throw new SyntaxErr(`'${mistake}' is not an operator; ${hint}`, i);
      const op = OPERATORS.find((o) => src.startsWith(o, i));
      if (op === undefined) throw new SyntaxErr(`unexpected character '${c}'`, i);
      tokens.push({ kind: "op", text: op, pos: start });
      i += op.length;
    }
  }
  tokens.push({ kind: "end", text: "", pos: src.length });
  return tokens;
}

const COMPARISON = 40;
const NOT_POWER = 30;
const MINUS_POWER = 70;
const POWERS: Record<string, number> = {
  or: 10, and: 20, "==": 40, "!=": 40, "<": 40, "<=": 40, ">": 40, ">=": 40, in: 40, "not in": 40,
  "+": 50, "-": 50, "*": 60, "/": 60, "%": 60,
};

class Parser {
  private i = 0;
  private nesting = 0;
  private readonly depths = new WeakMap<Node, number>();
  constructor(private readonly tokens: Token[]) {}

  parse(): Node {
    const node = this.expression(0);
    const t = this.tokens[this.i];
    if (t.kind !== "end") throw new SyntaxErr(`unexpected ${describe(t)}; expected an operator or the end of the expression`, t.pos);
    return node;
  }
  private peek(ahead = 0): Token {
    return this.tokens[Math.min(this.i + ahead, this.tokens.length - 1)];
  }
  private enter(t: Token): void {
    this.nesting += 1;
    if (this.nesting > MAX_DEPTH) throw new SyntaxErr(`expression is nested too deeply (limit ${MAX_DEPTH})`, t.pos);
  }
  private built(node: Node, children: Node[]): Node {
    const d = 1 + Math.max(0, ...children.map((c) => this.depths.get(c) ?? 1));
    if (d > MAX_DEPTH) throw new SyntaxErr(`expression is nested too deeply (limit ${MAX_DEPTH})`, node.pos);
    this.depths.set(node, d);
    return node;
  }
  private expression(min: number): Node {
    let left = this.prefix(min);
    let chained = false;
    for (;;) {
      const t = this.peek();
      const op = this.infix(t);
      if (op === null || POWERS[op] <= min) return left;
      const power = POWERS[op];
      if (power === COMPARISON && chained)
        throw new SyntaxErr(`comparisons cannot be chained; combine them with 'and' (found '${op}')`, t.pos);
      this.i += op === "not in" ? 2 : 1;
      const right = this.expression(power);
      left = this.built({ k: "bin", op, l: left, r: right, pos: t.pos }, [left, right]);
      chained = power === COMPARISON;
    }
  }
  private infix(t: Token): string | null {
    if (t.kind === "op" && t.text in POWERS) return t.text;
    if (t.kind !== "keyword" || !["and", "or", "in", "not"].includes(t.text)) return null;
    if (t.text !== "not") return t.text;
    const next = this.peek(1);
    if (!(next.kind === "keyword" && next.text === "in")) throw new SyntaxErr(`expected 'in' after 'not', found ${describe(next)}`, next.pos);
    return "not in";
  }
  private prefix(min: number): Node {
    const t = this.tokens[this.i++];
    if (t.kind === "number" || t.kind === "string") return { k: "const", v: t.value ?? null, pos: t.pos };
    if (t.kind === "keyword" && (t.text === "true" || t.text === "false" || t.text === "null"))
      return { k: "const", v: t.text === "null" ? null : t.text === "true", pos: t.pos };
    if (t.kind === "name") {
      const next = this.peek();
      if (next.kind === "op" && next.text === "(") return this.call(t);
      return { k: "name", parts: t.text.split("."), pos: t.pos };
    }
    if (t.kind === "op" && t.text === "(") {
      this.enter(t);
      const node = this.expression(0);
      this.expect(")", t);
      return node;
    }
    if (t.kind === "op" && t.text === "[") {
      const items = this.sequence(t, "]");
      return this.built({ k: "list", items, pos: t.pos }, items);
    }
    if ((t.kind === "op" && t.text === "-") || (t.kind === "keyword" && t.text === "not")) {
      if (t.text === "not" && min > NOT_POWER) throw new SyntaxErr("'not' must be put in parentheses here", t.pos);
      this.enter(t);
      const x = this.expression(t.text === "not" ? NOT_POWER : MINUS_POWER);
      this.nesting -= 1;
      return this.built({ k: "un", op: t.text as "-" | "not", x, pos: t.pos }, [x]);
    }
    throw new SyntaxErr(`unexpected ${describe(t)}; expected a value (number, string, true, false, null, field name, function call, '(' or '[')`, t.pos);
  }
  private call(name: Token): Node {
    const arity = FUNCTIONS[name.text];
    if (arity === undefined)
      throw new SyntaxErr(`unknown function '${name.text}'; expected one of ${Object.keys(FUNCTIONS).sort().join(", ")}`, name.pos);
    const args = this.sequence(this.tokens[this.i++], ")");
    const [low, high] = arity;
    if (args.length < low || (high !== null && args.length > high))
      throw new SyntaxErr(`${name.text}() takes ${low === high ? low : high === null ? `at least ${low}` : `${low} to ${high}`} argument(s), got ${args.length}`, name.pos);
    return this.built({ k: "call", fn: name.text, args, pos: name.pos }, args);
  }
  private sequence(opener: Token, closer: string): Node[] {
    this.enter(opener);
    const items: Node[] = [];
    while (!(this.peek().kind === "op" && this.peek().text === closer)) {
      items.push(this.expression(0));
      if (!(this.peek().kind === "op" && this.peek().text === ",")) break;
      this.i += 1;
    }
    this.expect(closer, opener);
    return items;
  }
  private expect(closer: string, opener: Token): void {
    const t = this.tokens[this.i++];
    if (!(t.kind === "op" && t.text === closer))
      throw new SyntaxErr(`expected '${closer}' to close '${opener.text}' from column ${opener.pos + 1}, found ${describe(t)}`, t.pos);
    this.nesting -= 1;
  }
}

function describe(t: Token): string {
  return t.kind === "end" ? "end of the expression" : `'${t.text}'`;
}

const cache = new Map<string, Node>();

export function parse(source: string): Node {
  const hit = cache.get(source);
  if (hit) return hit;
  if (source.length > MAX_SOURCE_LENGTH) throw new SyntaxErr(`expression is longer than ${MAX_SOURCE_LENGTH} characters`, null);
  if (!source.trim()) throw new SyntaxErr("empty expression", 0);
  const node = new Parser(tokenize(source)).parse();
  if (cache.size > 1000) cache.clear();
  cache.set(source, node);
  return node;
}
