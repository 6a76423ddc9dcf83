// One input per field type: text, numbers (money with its currency), booleans, enums and options,
// dates and times, JSON, masked values, relation pickers with search, child tables.
import { useEffect, useState } from "preact/hooks";
import { get } from "../api";
import { html } from "../html";
import { type FieldState, moveRow } from "../logic";
import type { FieldMeta, Row } from "../meta";

type InputProps = {
  field: FieldMeta;
  id: string;
  label: string;
  value: unknown;
  state: FieldState;
  error?: string;
  help?: string | null;
  errors: Map<string, string>;
  path: string;
  onChange: (value: unknown, picked?: Row) => void;
};

const NUMERIC = new Set(["integer", "decimal", "money", "percent", "number"]);

export function FieldInput(p: InputProps) {
  const { field, id, state } = p;
  const described = [p.help ? `${id}-help` : "", p.error ? `${id}-error` : ""].filter(Boolean).join(" ") || undefined;
  const common = {
    id, name: field.name, disabled: state.readonly, required: state.required,
    "aria-invalid": p.error ? "true" : undefined, "aria-describedby": described,
  };
  let control;
  const text = (e: Event) => (e.target as HTMLInputElement).value;
  if (field.type === "child") {
    return html`<fieldset class="field child" aria-describedby=${described}>
      <legend class=${state.required ? "required" : ""}>${p.label}</legend>
      <${ChildTable} ...${p} />
      ${p.error && html`<p class="error" id=${`${id}-error`}>${p.error}</p>`}
    </fieldset>`;
  }
  if (field.type === "boolean") {
    return html`<div class="field check">
      <input type="checkbox" ...${common} checked=${p.value === true} onChange=${(e: Event) => p.onChange((e.target as HTMLInputElement).checked)} />
      <label for=${id}>${p.label}</label>
      ${p.help && html`<p class="help" id=${`${id}-help`}>${p.help}</p>`}
      ${p.error && html`<p class="error" id=${`${id}-error`}>${p.error}</p>`}
    </div>`;
  }
  if (field.type === "relation" && field.relation) control = html`<${RelationPicker} ...${p} common=${common} />`;
  else if (field.options) {
    control = html`<select ...${common} value=${p.value === null || p.value === undefined ? "" : String(p.value)}
      onChange=${(e: Event) => { const v = (e.target as HTMLSelectElement).value; p.onChange(field.options?.find((o) => String(o.value) === v)?.value ?? null); }}>
      <option value="">—</option>
      ${field.options.map((o) => html`<option value=${String(o.value)}>${o.label}</option>`)}
    </select>`;
  } else if (field.type === "text" || field.type === "richtext" || field.type === "json") {
    const shown = field.type === "json" && p.value !== null && typeof p.value !== "string" ? JSON.stringify(p.value, null, 1) : (p.value ?? "");
    control = html`<textarea ...${common} rows="3" value=${shown} onInput=${(e: Event) => {
      const v = text(e);
      if (field.type !== "json") return p.onChange(v);
      try { p.onChange(v ? JSON.parse(v) : null); } catch { p.onChange(v); }
    }} />`;
  } else {
    const type = field.masked ? "password" : field.type === "date" ? "date" : field.type === "datetime" ? "datetime-local" : field.type === "time" ? "time" : "text";
    const numeric = NUMERIC.has(field.type);
    const value = field.type === "datetime" && typeof p.value === "string" ? p.value.slice(0, 16) : (p.value ?? "");
    control = html`<span class=${field.currency ? "money" : ""}>
      <input ...${common} type=${type} inputmode=${numeric ? (field.type === "integer" ? "numeric" : "decimal") : undefined}
        value=${field.multiple && Array.isArray(p.value) ? p.value.join(", ") : value}
        placeholder=${field.masked && p.value === "****" ? "unchanged" : undefined}
        autocomplete=${field.masked ? "off" : undefined}
        onInput=${(e: Event) => {
          const v = text(e);
          if (field.multiple) return p.onChange(v ? v.split(",").map((x) => x.trim()) : []);
          p.onChange(field.type === "integer" && /^-?\d+$/.test(v) ? Number(v) : v);
        }} />
      ${field.currency && html`<span class="currency" aria-hidden="true">${field.currency}</span>`}
    </span>`;
  }
  return html`<div class="field">
    <label for=${id} class=${state.required ? "required" : ""}>${p.label}</label>
    ${control}
    ${p.help && html`<p class="help" id=${`${id}-help`}>${p.help}</p>`}
    ${p.error && html`<p class="error" id=${`${id}-error`}>${p.error}</p>`}
  </div>`;
}

/**
 * A relation as an ARIA combobox (the APG "list autocomplete" pattern): the input shows the chosen
 * record's label (its display field); typing searches the related entity by that field as you
 * type (200 ms); Up/Down move through the options, Enter picks, Escape closes and restores.
 */
function RelationPicker(p: InputProps & { common: Record<string, unknown> }) {
  const rel = p.field.relation as { entity: string; display_field: string | null };
  const display = rel.display_field ?? "id";
  const labelOf = (r: Row | null | undefined) => (r ? String(r[display] ?? r.id) : "");
  const [current, setCurrent] = useState<Row | null>(null);
  const [text, setText] = useState<string | null>(null); // null: not typing, show the label
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(-1);
  const [options, setOptions] = useState<Row[]>([]);
  const [error, setError] = useState<string | null>(null);
  const extra = p.field.fill ?? [];
  const listId = `${p.id}-list`;
  useEffect(() => {  // the chosen record, for its label
    let live = true;
    if (!p.value) setCurrent(null);
    else if (current?.id !== p.value)
      get<Row>(`api/${rel.entity}/${p.value}`).then((a) => live && setCurrent(a.data), () => live && setCurrent({ id: p.value, [display]: p.value }));
    return () => { live = false; };
  }, [p.value, rel.entity]);
  useEffect(() => {  // the options, searched as the person types
    if (!open) return;
    let live = true;
    const handle = setTimeout(async () => {
      const q = new URLSearchParams({ limit: "20", sort: display, fields: [display, ...extra].join(",") });
      if (text) q.set(`${display}[ilike]`, `%${text}%`);
      try {
        const found = (await get<Row[]>(`api/${rel.entity}?${q}`)).data;
        if (live) { setOptions(found); setActive(found.length ? 0 : -1); setError(null); }
      } catch (e) {
        if (live) setError(String((e as Error).message));
      }
    }, text ? 200 : 0);
    return () => { live = false; clearTimeout(handle); };
  }, [text, open, rel.entity]);
  if (p.state.readonly) return html`<input id=${p.id} disabled value=${labelOf(current) || String(p.value ?? "")} />`;
  const pick = (row: Row) => {
    setCurrent(row);
    setText(null);
    setOpen(false);
    p.onChange(row.id, row);
  };
  const close = () => { setOpen(false); setText(null); };
  const onKey = (e: KeyboardEvent) => {
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      if (!open) return setOpen(true);
      const step = e.key === "ArrowDown" ? 1 : -1;
      setActive((a) => (options.length ? (a + step + options.length) % options.length : -1));
    } else if (e.key === "Enter" && open) {
      e.preventDefault();
      if (options[active]) pick(options[active]);
    } else if (e.key === "Escape" && open) {
      e.preventDefault();
      close();
    }
  };
  return html`<div class="combo">
    <input ...${p.common} type="text" role="combobox" autocomplete="off" aria-autocomplete="list"
      aria-expanded=${open} aria-controls=${listId}
      aria-activedescendant=${open && active >= 0 ? `${listId}-${active}` : undefined}
      placeholder="Type to search…" value=${text ?? labelOf(current)}
      onInput=${(e: Event) => {
        const v = (e.target as HTMLInputElement).value;
        setText(v);
        setOpen(true);
        if (!v) { setCurrent(null); p.onChange(null); }
      }}
      onFocus=${() => setOpen(true)} onClick=${() => setOpen(true)} onKeyDown=${onKey} onBlur=${() => setTimeout(close, 150)} />
    <ul role="listbox" id=${listId} aria-label=${`${p.label} options`} hidden=${!open}>
      ${options.map((o, i) => html`<li role="option" id=${`${listId}-${i}`} aria-selected=${i === active}
        class=${i === active ? "active" : ""} onMouseDown=${(e: Event) => e.preventDefault()} onClick=${() => pick(o)}>${labelOf(o)}</li>`)}
      ${open && options.length === 0 && !error && html`<li role="option" aria-disabled="true" aria-selected="false" class="muted">No match</li>`}
    </ul>
    ${error && html`<span class="error">${error}</span>`}
  </div>`;
}

/** Child rows: add, remove, move up and down; errors shown on their cells (``lines[1].qty``). */
function ChildTable(p: InputProps) {
  const child = p.field.child as NonNullable<FieldMeta["child"]>;
  const rows = (Array.isArray(p.value) ? p.value : []) as Row[];
  const seq = child.sequence_field;
  const columns = child.fields.filter((f) => f.name !== seq);
  const readonly = p.state.readonly;
  const update = (i: number, name: string, v: unknown, picked?: Row) => {
    const next = rows.map((r, j) => (j === i ? { ...r, [name]: v } : r));
    if (picked) {
      for (const f of columns) {
        const fill = f.auto_fill;
        if (fill?.from === name && picked[fill.field] !== undefined) next[i] = { ...next[i], [f.name]: picked[fill.field] };
      }
    }
    p.onChange(next);
  };
  const renumber = (list: Row[]) => (seq ? list.map((r, i) => ({ ...r, [seq]: i + 1 })) : list);
  const blank = () => Object.fromEntries(columns.filter((f) => f.default !== null && f.default !== undefined).map((f) => [f.name, f.default]));
  return html`<div class="scroll" tabindex="0" role="group" aria-label=${`${p.label} rows`}><table class="child-table">
    <thead><tr><th scope="col">#</th>${columns.map((f) => html`<th scope="col">${f.caption ?? f.name}</th>`)}${!readonly && html`<th scope="col"><span class="sr-only">Row actions</span></th>`}</tr></thead>
    <tbody>
      ${rows.map((row, i) => html`<tr>
        <td>${i + 1}</td>
        ${columns.map((f) => {
          const path = `${p.path}[${i}].${f.name}`;
          const meta = f.type === "relation" ? { ...f, fill: columns.flatMap((g) => (g.auto_fill?.from === f.name ? [g.auto_fill.field] : [])) } : f;
          return html`<td data-label=${f.caption ?? f.name}>
            <${FieldInput} field=${meta} id=${`${p.id}-${i}-${f.name}`} label=${`${f.caption ?? f.name}, row ${i + 1}`}
              value=${row[f.name] ?? null} errors=${p.errors} path=${path} error=${p.errors.get(path)}
              state=${{ visible: true, readonly: readonly || f.read_only || !!f.computed, required: f.required }}
              onChange=${(v: unknown, picked?: Row) => update(i, f.name, v, picked)} />
          </td>`;
        })}
        ${!readonly && html`<td class="row-actions">
          <button type="button" aria-label=${`Move row ${i + 1} up`} disabled=${i === 0} onClick=${() => p.onChange(moveRow(rows, i, -1, seq))}>↑</button>
          <button type="button" aria-label=${`Move row ${i + 1} down`} disabled=${i === rows.length - 1} onClick=${() => p.onChange(moveRow(rows, i, 1, seq))}>↓</button>
          <button type="button" aria-label=${`Remove row ${i + 1}`} onClick=${() => p.onChange(renumber(rows.filter((_, j) => j !== i)))}>✕</button>
        </td>`}
      </tr>`)}
    </tbody>
  </table>
  ${!readonly && html`<button type="button" onClick=${() => p.onChange(renumber([...rows, blank()]))}>Add row to ${p.label}</button>`}
  </div>`;
}
