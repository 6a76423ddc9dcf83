import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { csvCell, csvHeader, guarded, toCsv } from "../src/csv";

// the cells the server's import reads back as the same values (tests/server/test_imports.py)
const file = JSON.parse(readFileSync(new URL("./csv-vectors.json", import.meta.url), "utf8")) as {
  vectors: { field: string; value: unknown; json: boolean; cell: string }[];
};

describe("csv", () => {
  it("quotes what needs quoting and nothing else", () => {
    expect(csvCell("plain")).toBe("plain");
    expect(csvCell('say "hi", then')).toBe('"say ""hi"", then"');
    expect(csvCell("two\nlines")).toBe('"two\nlines"');
    expect(csvCell(" padded")).toBe('" padded"');
    expect(csvCell(null)).toBe("");
    expect(csvCell(12.5)).toBe("12.5");
    expect(csvCell(["a", "b"])).toBe('"[""a"",""b""]"');
  });
  it("writes a header and CRLF rows", () => {
    expect(toCsv(["id", "name"], [{ id: "1", name: "A, B" }, { id: "2" }])).toBe('id,name\r\n1,"A, B"\r\n2,\r\n');
    expect(toCsv(["x"], [{ x: "hello" }], new Set(["x"]))).toBe('x\r\n"""hello"""\r\n');
  });
  it("guards cells a spreadsheet would run, and nothing else", () => {
    for (const text of ["=1+2", "+A1", "-A1", "@SUM(1)", "\tx", "\rx", "'x"]) expect(guarded(text)).toBe(`'${text}`);
    for (const text of ["-5", "+1.5", "plain", "", "a=b"]) expect(guarded(text)).toBe(text);
  });
  it.each(file.vectors.map((v) => [`${v.field} ${JSON.stringify(v.value)}`, v] as const))("writes the shared vector %s", (_, v) => {
    expect(csvCell(v.value, v.json)).toBe(v.cell);
  });
  it("reads a header as the server does", () => {
    expect(csvHeader('\uFEFFid,"a, b","say ""x""",c\r\n1,2,3,4')).toEqual(["id", "a, b", 'say "x"', "c"]);
  });
});
