import { describe, expect, it } from "vitest";
import { csvCell, toCsv } from "../src/csv";

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
  });
});
