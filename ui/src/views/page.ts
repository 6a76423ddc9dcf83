// A page from its manifest: blocks in a single, split or grid layout; ``binds`` pass a block's
// selection (a record id) to another block's parameter; ``context`` values (contexts.ts) fill the
// blocks' ``props`` templates, and the realtime ones follow their entity over the live socket.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { Problem, call, get } from "../api";
import { type ContextDecl, type Env, type Loader, type Memo, type Resolved, fillProps, forget, qualified, resolveContexts, textOf } from "../contexts";
import { blockedBlock, blockedContexts } from "../grants";
import { html } from "../html";
import { listen } from "../live";
import type { AppDetail, Block, Component, Me, PageMeta, Row, TableComp } from "../meta";
import { entityMeta } from "../store";
import { formPage } from "../titles";
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

/** Where contexts come from: the REST API with the caller's token (its permissions, row scope and
 * field rules); a record that is not there (404) is nothing, any other refusal a failure. Service
 * calls go ``through`` the app (``api/_apps/{app}``): the server checks the owner's grant by it. */
const loaderFor = (through: string): Loader => ({
  async record(entity, id) {
    const meta = await entityMeta(entity);
    if (!meta.api || !meta.rest.includes("find")) throw new Error(`${entity} is not readable over REST`);
    try {
      return { row: (await get<Row>(`${meta.api}/${encodeURIComponent(id)}`)).data, fields: meta.fields };
    } catch (error) {
      if (error instanceof Problem && error.status === 404) return null;
      throw error;
    }
  },
  async list(entity, params) {
    const meta = await entityMeta(entity);
    if (!meta.api || !meta.rest.includes("list")) throw new Error(`${entity} is not listed over REST`);
    const query = new URLSearchParams(params).toString();
    return { rows: (await get<Row[]>(query ? `${meta.api}?${query}` : meta.api)).data, fields: meta.fields };
  },
  async call(module, service, action, params) {
    const answer = await call<{ result?: unknown }>("POST", `${through}/${module}/${service}/${action}`, params);
    return answer.data?.result ?? null;
  },
});

const NONE: Resolved = { values: {}, typed: {}, problems: {}, targets: [] };

/** The page's contexts, resolved when it opens; a realtime context reads its record (or list)
 * again on each of its entity's live events (150 ms batches), the others keep what they read. */
function usePageContexts(decls: ContextDecl[], env: Env, loader: Loader): Resolved | null {
  const memo = useRef<Memo>(new Map());
  const [resolved, setResolved] = useState<Resolved | null>(decls.length ? null : NONE);
  const [tick, setTick] = useState(0);
  const envKey = JSON.stringify(env);
  useEffect(() => {
    if (!decls.length) return;
    let live = true;
    resolveContexts(decls, env, loader, memo.current).then((r) => live && setResolved(r));
    return () => {
      live = false;
    };
  }, [decls, envKey, tick]);
  const targets = resolved?.targets ?? [];
  const targetKey = JSON.stringify(targets);
  useEffect(() => {
    let pending: ReturnType<typeof setTimeout> | null = null;
    const changed = new Set<string>();
    const stops = targets.map((t) =>
      listen(t.entity, t.record, () => {
        changed.add(t.name);
        pending ??= setTimeout(() => {
          pending = null;
          for (const name of changed) forget(memo.current, name);
          changed.clear();
          setTick((n) => n + 1);
        }, 150);
      }),
    );
    return () => {
      for (const stop of stops) stop();
      if (pending) clearTimeout(pending);
    };
  }, [targetKey]);
  return resolved;
}

/** A block with no component but ``props`` (``title``, ``text``, ``fields``: label → value),
 * their ``{context.…}`` templates filled: a page's summary of its contexts. */
function SummaryBlock({ props, index }: { props: Record<string, unknown>; index: number }) {
  const title = typeof props.title === "string" ? props.title : null;
  const fields = props.fields && typeof props.fields === "object" && !Array.isArray(props.fields) ? Object.entries(props.fields) : [];
  const id = `summary-${index}`;
  return html`<section class="block summary" aria-labelledby=${title ? id : undefined} aria-label=${title ? undefined : "Summary"}>
    ${title && html`<h2 id=${id}>${title}</h2>`}
    ${props.text !== undefined && html`<p>${textOf(props.text)}</p>`}
    ${fields.length > 0 && html`<dl>${fields.map(([label, value]) => html`<div><dt>${label}</dt><dd>${textOf(value)}</dd></div>`)}</dl>`}
  </section>`;
}

export function PageView({ app, page, id, query, me, setCrumb }: Props) {
  const [selected, setSelected] = useState<Record<string, string | null>>({});
  const env: Env = { session: { username: me.username, roles: me.roles }, route: { ...Object.fromEntries(query), ...(id ? { id } : {}) } };
  const all = useMemo(() => qualified(page.context ?? [], page.name.split("/")[0]), [page]);
  // contexts calling an action another app has not granted this one are not run (grants.ts)
  const blocked = useMemo(() => blockedContexts(all, app.grants ?? [], app.title), [all, app]);
  const decls = useMemo(() => all.filter((d) => !(d.name in blocked)), [all, blocked]);
  const loader = useMemo(() => loaderFor(app.through ?? "api"), [app]);
  const contexts = usePageContexts(decls, env, loader);
  useEffect(() => {
    document.title = `${page.title ?? page.name} · ${app.title}`;
    setCrumb(null);
  }, [page.name]);
  const refKey = (ref: string | undefined) => (ref && !ref.includes("/") ? `${app.name.split("/")[0]}/${ref}` : ref ?? "");
  const component = (ref: string | undefined) => (ref ? app.components[refKey(ref)] : undefined);
  const scope = { context: contexts?.values ?? {}, session: env.session, route: env.route };
  const render = (block: Block, index: number) => {
    const c = component(block.ref);
    const key = block.id ?? `block-${index}`;
    const missing = blockedBlock(block, blocked);
    if (missing) return html`<section class="block blocked"><p class="muted" role="note">${missing}</p></section>`;
    if (!block.ref && !block.asset && block.props) {
      if (!contexts) return html`<section class="block summary" aria-busy="true"><p class="muted">Loading…</p></section>`;
      const props = fillProps(block.props, scope);
      return html`<${SummaryBlock} props=${props} index=${index} />`;
    }
    if (!c) return html`<section class="block"><p class="muted">This block (${block.ref ?? "asset"}) has no renderer here.</p></section>`;
    if (c.kind === "kanban") return html`<section class="block" aria-label=${c.title ?? "Board"}><${KanbanBlock} board=${c} me=${me} /></section>`;
    if (c.kind === "dashboard") return html`<section class="block" aria-label=${c.title ?? "Dashboard"}><${DashboardBlock} board=${c} app=${app} me=${me} /></section>`;
    if (c.kind === "approval_inbox")
      return html`<section class="block" aria-label=${c.title ?? "Approvals"}><${InboxBlock} name=${refKey(block.ref)} inbox=${c} app=${app} /></section>`;
    let fixed: Record<string, string> | undefined;
    if ((c.kind === "listing" || c.kind === "table") && block.param) {
      // ``param``: list parameters fixed by the page, templates over its contexts filled; one
      // that comes out empty lists nothing (never the whole entity)
      if (!contexts) return html`<section class="block" aria-busy="true" aria-label=${c.title ?? "List"}><p class="muted">Loading…</p></section>`;
      fixed = Object.fromEntries(Object.entries(fillProps(block.param, scope)).map(([k, v]) => [k, textOf(v)]));
      if (Object.values(fixed).some((v) => v.trim() === ""))
        return html`<section class="block" aria-label=${c.title ?? "List"}><h2>${c.title ?? "List"}</h2><p class="muted">Nothing to list here.</p></section>`;
    }
    if (c.kind === "listing") {
      const table: TableComp = { kind: "table", entity: c.entity, title: c.title, columns: c.fields.map((field) => ({ field })), filters: c.filters, fixed_filters: [], page_size: 25 };
      return html`<section class="block" aria-label=${c.title ?? "List"}><${TableBlock} table=${table} me=${me} query=${query} selected=${null} onSelect=${null} openHref=${null} fixed=${fixed} /></section>`;
    }
    if (c.kind === "table") {
      const target = formPage(app, c.form);
      const bound = page.blocks.some((b) => b.binds?.source === key);
      return html`<section class="block" aria-label=${c.title ?? "List"}>
        <${TableBlock} table=${c} me=${me} query=${query} fixed=${fixed}
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
    ${contexts && Object.keys(contexts.problems).length > 0 && html`<div class="error context-problems" role="status">
      ${Object.entries(contexts.problems).map(([name, why]) => html`<p>Context ${name}: ${why}</p>`)}
    </div>`}
    ${Object.keys(blocked).length > 0 && html`<div class="notice grants-missing" role="status">
      ${Object.entries(blocked).map(([name, why]) => html`<p>${name}: ${why}</p>`)}
    </div>`}
    <div class="blocks">${page.blocks.map((b, i) => html`<${Guard} key=${b.id ?? i}>${render(b, i)}<//>`)}</div>
  </div>`;
}
