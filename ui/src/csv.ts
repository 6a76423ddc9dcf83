// dap's one CSV dialect, written here and read by the server (dap/server/workflows/csvdialect.py):
// RFC 4180 with CRLF records, a cell quoted when it holds a comma, a quote, CR or LF or has white
// space at either end. Values are the API's own (ids for relations, exact decimal strings); JSON
// fields and multiple-valued ones are written as JSON. The formula guard (OWASP, CSV injection):
// a cell beginning with = + - @ tab or CR gets a single quote before it so a spreadsheet shows it
// as text (a cell that is only a number is left alone), and a cell beginning with a quote gets one
// more; the server's import drops that one quote again, so an export imports back as it was.
// ui/test/csv-vectors.json pins both sides to the same cells.

const TRIGGERS = new Set(["=", "+", "-", "@", "\t", "\r"]);
const NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

/** A cell's text with the formula guard applied. */
export function guarded(text: string): string {
  if (text !== "" && (text[0] === "'" || (TRIGGERS.has(text[0]) && !NUMBER.test(text)))) return `'${text}`;
  return text;
}

/** One cell: ``json`` writes the value as JSON whatever it is (a JSON or multiple-valued field). */
export function csvCell(value: unknown, json = false): string {
  if (value === null || value === undefined) return "";
  const text = guarded(json || typeof value === "object" ? JSON.stringify(value) : String(value));
  return /[",\r\n]/.test(text) || /^\s|\s$/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The file: a header of ``columns`` and one CRLF record per row; ``json`` names JSON columns. */
export function toCsv(columns: string[], rows: Record<string, unknown>[], json: ReadonlySet<string> = new Set()): string {
  const lines = [columns.map((c) => csvCell(c)).join(",")];
  for (const row of rows) lines.push(columns.map((c) => csvCell(row[c], json.has(c))).join(","));
  return `${lines.join("\r\n")}\r\n`;
}

/** The first record of ``text`` (a file's header) as the server reads it, quotes and all. */
export function csvHeader(text: string): string[] {
  const cells: string[] = [];
  let cell = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') { cell += '"'; i++; }
      else if (ch === '"') quoted = false;
      else cell += ch;
    } else if (ch === '"' && cell === "") quoted = true;
    else if (ch === ",") { cells.push(cell); cell = ""; }
    else if (ch === "\r" || ch === "\n") break;
    else cell += ch;
  }
  cells.push(cell);
  return cells.map((c, i) => (i === 0 ? c.replace(/^\uFEFF/, "") : c));
}
