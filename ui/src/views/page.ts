// A page from its manifest: blocks in a single, split or grid layout; ``binds`` pass a block's
// selection (a record id) to another block's parameter.
import { useEffect, useState } from "preact/hooks";
import { html } from "../html";
import type { AppDetail, Block, Component, Me, PageMeta, TableComp } from "../meta";
import { pageHref } from "../route";
import { InboxBlock } from "./approvals";
import { DashboardBlock } from "./dashboard";
import { FormBlock } from "./form";
import { Guard } from "./guard";
import { KanbanBlock } from "./kanban";
import { TableBlock } from "./table";

type Props = {
  app: AppDetail;
  page: PageMeta;
  id: string | null;
  query: URLSearchParams;
  me: Me;
  setCrumb: (c: string | null) => void;
};

/** The page whose route takes an id and which shows ``formRef``: where a table's rows open. */
export function formPage(app: AppDetail, formRef: string | undefined): string | null {
  if (!formRef) return null;
  const page = app.pages.find((p) => (p.route ?? "").includes(":") && p.blocks.some((b) => b.ref && (b.ref === formRef || formRef.endsWith(`/${b.ref}`))));
  return page?.name ?? null;
}

/** A component shown in a chrome region (``chrome.regions``): lists, boards, dashboards, inboxes. */
export function RegionBlock({ app, me, name, refName }: { app: AppDetail; me: Me; name: string; refName: string }) {
  const key = refName.includes("/") ? refName : `${app.name.split("/")[0]}/${refName}`;
  const c = app.components[key];
  const label = (c && "title" in c && c.title) || name;
  const body = () => {
    if (!c || c.kind === "form") return html`<p class="muted">${refName} cannot be shown in a region.</p>`;
    if (c.kind === "kanban") return html`<${KanbanBlock} board=${c} me=${me} />`;
    if (c.kind === "dashboard") return html`<${DashboardBlock} board=${c} app=${app} me=${me} />`;
    if (c.kind === "approval_inbox") return html`<${InboxBlock} name=${key} inbox=${c} app=${app} />`;
    const table: TableComp = c.kind === "listing"
      ? { kind: "table", entity: c.entity, title: c.title, columns: c.fields.map((field) => ({ field })), filters: [], fixed_filters: [], page_size: 10 }
      : c;
    const target = formPage(app, table.form ?? Object.entries(app.components).find(([, x]) => x.kind === "form" && x.entity === table.entity)?.[0]);
    return html`<${TableBlock} table=${table} me=${me} query=${new URLSearchParams()} selected=${null} onSelect=${null} compact=${true}
      openHref=${target ? (rowId: string) => pageHref(app.name, target, rowId) : null} />`;
  };
  return html`<aside class=${`region region-${name}`} aria-label=${label}><${Guard}>${body()}<//></aside>`;
}

export function PageView({ app, page, id, query, me, setCrumb }: Props) {
  const [selected, setSelected] = useState<Record<string, string | null>>({});
  useEffect(() => {
    document.title = `${page.title ?? page.name} · ${app.title}`;
    setCrumb(null);
  }, [page.name]);
  const refKey = (ref: string | undefined) => (ref && !ref.includes("/") ? `${app.name.split("/")[0]}/${ref}` : ref ?? "");
  const component = (ref: string | undefined) => (ref ? app.components[refKey(ref)] : undefined);
  const render = (block: Block, index: number) => {
    const c = component(block.ref);
    const key = block.id ?? `block-${index}`;
    if (!c) return html`<section class="block"><p class="muted">This block (${block.ref ?? "asset"}) has no renderer here.</p></section>`;
    if (c.kind === "kanban") return html`<section class="block" aria-label=${c.title ?? "Board"}><${KanbanBlock} board=${c} me=${me} /></section>`;
    if (c.kind === "dashboard") return html`<section class="block" aria-label=${c.title ?? "Dashboard"}><${DashboardBlock} board=${c} app=${app} me=${me} /></section>`;
    if (c.kind === "approval_inbox")
      return html`<section class="block" aria-label=${c.title ?? "Approvals"}><${InboxBlock} name=${refKey(block.ref)} inbox=${c} app=${app} /></section>`;
    if (c.kind === "listing") {
      const table: TableComp = { kind: "table", entity: c.entity, title: c.title, columns: c.fields.map((field) => ({ field })), filters: c.filters, fixed_filters: [], page_size: 25 };
      return html`<section class="block" aria-label=${c.title ?? "List"}><${TableBlock} table=${table} me=${me} query=${query} selected=${null} onSelect=${null} openHref=${null} /></section>`;
    }
    if (c.kind === "table") {
      const target = formPage(app, c.form);
      const bound = page.blocks.some((b) => b.binds?.source === key);
      return html`<section class="block" aria-label=${c.title ?? "List"}>
        <${TableBlock} table=${c} me=${me} query=${query}
          selected=${selected[key] ?? null}
          onSelect=${bound ? (rowId: string) => setSelected((s) => ({ ...s, [key]: rowId })) : null}
          openHref=${target ? (rowId: string) => pageHref(app.name, target, rowId) : null} />
      </section>`;
    }
    const recordId = block.binds ? selected[block.binds.source] ?? null : id;
    if (block.binds && !recordId) return html`<section class="block detail"><p class="muted">Choose a row to see it here.</p></section>`;
    const isList = (x: Component | undefined): x is TableComp => x?.kind === "table" && !!x.form && x.entity === c.entity;
    const listPage = app.pages.find((p) => p.blocks.some((b) => isList(component(b.ref))));
    return html`<section class="block detail" aria-label=${c.title ?? "Form"}>
      <${FormBlock} key=${recordId ?? "new"} form=${c} app=${app} me=${me} id=${recordId === "new" ? null : recordId}
        mode=${block.mode ?? "edit"} setCrumb=${block.binds ? null : setCrumb}
        onCreated=${(newId: string) => { location.hash = pageHref(app.name, page.name, newId); }}
        onDeleted=${() => { location.hash = pageHref(app.name, listPage?.name ?? page.name); }}
        editHref=${block.mode === "view" && formPage(app, block.ref) ? pageHref(app.name, formPage(app, block.ref) ?? "", recordId) : null} />
    </section>`;
  };
  return html`<div class=${`page layout-${page.layout}`}>
    <h1>${page.title ?? page.name}</h1>
    <div class="blocks">${page.blocks.map((b, i) => html`<${Guard} key=${b.id ?? i}>${render(b, i)}<//>`)}</div>
  </div>`;
}
