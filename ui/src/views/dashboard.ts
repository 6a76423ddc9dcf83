// A Dashboard manifest: widgets on a 12-column grid. A widget's ``ref`` names an entity (number:
// a count, with ``config.filters``; chart: counts per ``config.group_by`` value) or a Table (list:
// its first ``config.limit`` rows).
import { get } from "../api";
import { useLoad } from "../hooks";
import { html } from "../html";
import type { AppDetail, DashboardComp, Me, TableComp, Widget } from "../meta";
import { entityMeta } from "../store";
import { columnsOf } from "./kanban";
import { TableBlock } from "./table";

async function count(entity: string, filters: Record<string, string> = {}): Promise<number> {
  const q = new URLSearchParams({ ...filters, limit: "1", count: "true", fields: "id" });
  return (await get<unknown[]>(`api/${entity}?${q}`)).total ?? 0;
}

export function DashboardBlock({ board, app, me }: { board: DashboardComp; app: AppDetail; me: Me }) {
  return html`<div class="dashboard-block">
    <h2>${board.title ?? "Dashboard"}</h2>
    <div class="dashboard">
      ${board.widgets.map((w) => html`<section class="widget" aria-label=${w.config?.label ?? w.ref}
        style=${`grid-column: ${w.layout.x + 1} / span ${w.layout.w}; grid-row: ${w.layout.y + 1} / span ${w.layout.h}`}>
        <${WidgetView} widget=${w} app=${app} me=${me} />
      </section>`)}
    </div>
  </div>`;
}

function WidgetView({ widget, app, me }: { widget: Widget; app: AppDetail; me: Me }) {
  const table = app.components[widget.ref];
  const kind = widget.config?.kind ?? (table?.kind === "table" ? "list" : "number");
  if (kind === "list" && table?.kind === "table") {
    const compact: TableComp = { ...table, title: widget.config?.label ?? table.title, page_size: widget.config?.limit ?? 5 };
    return html`<${TableBlock} table=${compact} me=${me} query=${new URLSearchParams()} selected=${null} onSelect=${null} openHref=${null} compact />`;
  }
  if (kind === "chart") return html`<${Chart} widget=${widget} />`;
  return html`<${NumberWidget} widget=${widget} />`;
}

function NumberWidget({ widget }: { widget: Widget }) {
  const value = useLoad(() => count(widget.ref, widget.config?.filters), [widget.ref]);
  return html`<div class="number">
    <h3>${widget.config?.label ?? widget.ref}</h3>
    <p class="figure" aria-live="polite">${value.error ? "—" : value.value ?? "…"}</p>
  </div>`;
}

function Chart({ widget }: { widget: Widget }) {
  const data = useLoad(async () => {
    const meta = await entityMeta(widget.ref);
    const groupBy = widget.config?.group_by ?? "";
    const columns = columnsOf(meta, groupBy);
    const counts = await Promise.all(columns.map((c) => count(widget.ref, { ...widget.config?.filters, [groupBy]: c.value })));
    return columns.map((c, i) => ({ ...c, n: counts[i] }));
  }, [widget.ref]);
  const max = Math.max(1, ...(data.value ?? []).map((d) => d.n));
  return html`<figure class="chart">
    <figcaption><h3>${widget.config?.label ?? widget.ref}</h3></figcaption>
    ${data.error && html`<p class="error">${data.error.message}</p>`}
    <ul>
      ${(data.value ?? []).map((d) => html`<li>
        <span class="bar-label">${d.label}</span>
        <span class="bar" style=${`width: ${(d.n / max) * 100}%`} aria-hidden="true"></span>
        <span class="bar-value">${d.n}</span>
      </li>`)}
    </ul>
  </figure>`;
}
