// The shared vectors: the same file is checked against the server's evaluator by
// tests/ui/test_expression_vectors.py, so both sides agree on every case here.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { DateV, Dec, type Value, evaluate } from "../src/expr";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
const file = JSON.parse(readFileSync(new URL("./expression-vectors.json", import.meta.url), "utf8")) as {
  context: Json;
  vectors: { expr: string; result: Json }[];
};

function decode(v: Json): Value {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") return BigInt(v);
  if (Array.isArray(v)) return v.map(decode);
  if (typeof v.$dec === "string") return Dec.parse(v.$dec);
  if (typeof v.$date === "string") return DateV.parse(v.$date);
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, decode(x)]));
}

function encode(v: Value): Json {
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Dec) return { $dec: v.m === 0n ? "0" : v.normal() };
  if (v instanceof DateV) return { $date: v.toString() };
  if (Array.isArray(v)) return v.map(encode);
  return v as Json;
}

describe("expression vectors shared with the server", () => {
  const context = decode(file.context) as { [key: string]: Value };
  for (const vector of file.vectors) {
    it(vector.expr || "<empty>", () => {
      let result: Json;
      try {
        result = encode(evaluate(vector.expr, context));
      } catch {
        result = { error: true };
      }
      expect(result).toEqual(vector.result);
    });
  }
});
