// A Kanban manifest: one column per state (or enum option), each loading one page of its cards;
// a card moves by drag and drop or by its "Move to" menu, through a transition (state) or an
// update (enum) — only to columns the API would accept.
import { useRef, useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { useLive, useLoad } from "../hooks";
import { html } from "../html";
import { buttonsFor, canEdit, formatValue } from "../logic";
import type { EntityMeta, KanbanComp, Me, Row } from "../meta";
import { entityMeta } from "../store";
import { stateLabel } from "../titles";
import { fieldOf, relationLabels } from "./table";

export const CARDS_PER_PAGE = 20;

/** The columns: the machine's states when grouping by its field, else the field's options. */
export function columnsOf(meta: EntityMeta, groupBy: string): { value: string; label: string }[] {
  if (meta.state_machine && meta.state_machine.field === groupBy)
    return meta.state_machine.states.map((s) => ({ value: s, label: stateLabel(s) }));
  return (fieldOf(meta, groupBy)?.options ?? []).map((o) => ({ value: String(o.value), label: o.label }));
}

/** Where a card may go, and how: a transition's action, or an update of the field. */
export function movesOf(meta: EntityMeta, card: Row, groupBy: string, me: Me): Map<string, string | null> {
  const out = new Map<string, string | null>();
  const machine = meta.state_machine;
  if (machine && machine.field === groupBy) {
    const offered = new Set(buttonsFor(meta, card, me).map((b) => b.action));
    // a gated transition opens an approval (202) instead of moving the card: not a move here
    for (const t of machine.transitions)
      if (!t.approval && offered.has(t.action) && t.from.includes(String(card[groupBy]))) out.set(t.to, t.action);
    return out;
  }
  if (canEdit(meta, card, me)) for (const c of columnsOf(meta, groupBy)) if (c.value !== String(card[groupBy])) out.set(c.value, null);
  return out;
}

export function KanbanBlock({ board, me }: { board: KanbanComp; me: Me }) {
  const meta = useLoad(() => entityMeta(board.entity), [board.entity]);
  const [tick, setTick] = useState(0);
  const [problem, setProblem] = useState<string | null>(null);
  const [dragging, setDraggingState] = useState<Row | null>(null);
  // the card in hand, read by the columns' drag handlers at once: the state above only restyles
  // the columns, and its re-render can come after the first dragover on a busy machine (the drop
  // was then refused)
  const held = useRef<Row | null>(null);
  const setDragging = (r: Row | null) => { held.current = r; setDraggingState(r); };
  useLive(board.entity, null, () => setTick((t) => t + 1)); // another client's move shows at once
  if (meta.error) return html`<p class="error" role="alert">${meta.error.message}</p>`;
  if (!meta.value) return html`<p aria-busy="true">Loading…</p>`;
  const m = meta.value;
  const move = async (card: Row, to: string) => {
    const how = movesOf(m, card, board.group_by, me);
    if (!how.has(to)) return setProblem(`This card cannot move to ${to.replace(/_/g, " ")}.`);
    setProblem(null);
    try {
      const action = how.get(to);
      const headers = { "If-Match": `"${card.version}"` };
      if (action) await call("POST", `${m.api}/${card.id}/${action}`, {}, headers);
      else await call("PATCH", `${m.api}/${card.id}`, { [board.group_by]: to }, headers);
    } catch (e) {
      setProblem(e instanceof Problem ? e.detail : String(e));
    }
    setTick((t) => t + 1);
  };
  const columns = columnsOf(m, board.group_by);
  return html`<div class="kanban-block">
    <h2>${board.title ?? m.title}</h2>
    ${problem && html`<p class="error" role="alert">${problem}</p>`}
    <div class="kanban">
      ${columns.map((c) => html`<${Column} key=${`${c.value}-${tick}`} board=${board} meta=${m} me=${me} column=${c} columns=${columns}
        dragging=${dragging} held=${held} setDragging=${setDragging} move=${move} />`)}
    </div>
  </div>`;
}

type ColumnProps = {
  board: KanbanComp;
  meta: EntityMeta;
  me: Me;
  column: { value: string; label: string };
  columns: { value: string; label: string }[];
  dragging: Row | null;
  held: { current: Row | null };
  setDragging: (r: Row | null) => void;
  move: (card: Row, to: string) => void;
};

function Column({ board, meta, me, column, columns, dragging, held, setDragging, move }: ColumnProps) {
  const [pages, setPages] = useState(1);
  const cards = useLoad(async () => {
    const q = new URLSearchParams({ [board.group_by]: column.value, limit: String(CARDS_PER_PAGE * pages), offset: "0", count: "true" });
    const answer = await get<Row[]>(`${meta.api}?${q}`);
    const labels = await relationLabels(meta, answer.data, board.card_fields);
    return { rows: answer.data, total: answer.total ?? answer.data.length, labels };
  }, [pages]);
  const accepts = (card: Row | null) => card !== null && movesOf(meta, card, board.group_by, me).has(column.value);
  const droppable = accepts(dragging);
  const id = `col-${column.value}`;
  return html`<section class=${`column${droppable ? " droppable" : ""}`} aria-labelledby=${id}
    onDragOver=${(e: DragEvent) => { if (accepts(held.current)) e.preventDefault(); }}
    onDrop=${(e: DragEvent) => { e.preventDefault(); const card = held.current; if (card) move(card, column.value); setDragging(null); }}>
    <h3 id=${id}>${column.label} <span class="count">${cards.value?.total ?? ""}</span></h3>
    <ul>
      ${cards.value?.rows.map((card) => {
        const targets = movesOf(meta, card, board.group_by, me);
        const fields = board.card_fields.length ? board.card_fields : meta.fields.slice(0, 3).map((f) => f.name);
        return html`<li class="card" draggable=${targets.size > 0} data-id=${String(card.id)}
          onDragStart=${() => setDragging(card)} onDragEnd=${() => setDragging(null)}>
          ${fields.map((name, i) => html`<div class=${i === 0 ? "card-title" : ""}>${formatValue(fieldOf(meta, name), card[name], cards.value?.labels)}</div>`)}
          ${targets.size > 0 && html`<label class="sr-only" for=${`mv-${card.id}`}>Move ${String(card[fields[0]] ?? card.id)} to</label>
            <select id=${`mv-${card.id}`} class="move" onChange=${(e: Event) => { const v = (e.target as HTMLSelectElement).value; if (v) move(card, v); }}>
              <option value="">Move to…</option>
              ${columns.filter((c) => targets.has(c.value)).map((c) => html`<option value=${c.value}>${c.label}</option>`)}
            </select>`}
        </li>`;
      })}
    </ul>
    ${cards.value && cards.value.rows.length < cards.value.total && html`<button onClick=${() => setPages(pages + 1)}>Show more (${cards.value.total - cards.value.rows.length})</button>`}
  </section>`;
}
