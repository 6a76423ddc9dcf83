// How records and states are named to people: a record by its title field (from the metadata,
// see dap/server/web/ui_titles.py), a state by its label ("checked_in" → "Checked in"), and where
// an entity's list lives in an app (the breadcrumb's entity crumb opens it), and which page shows a form.
import type { AppDetail, EntityMeta, PageMeta, Row } from "./meta";

export function stateLabel(value: unknown): string {
  const s = String(value ?? "").replace(/_/g, " ");
  return s ? s[0].toUpperCase() + s.slice(1) : "";
}

/** The record's title: its title field's value, else its natural key, else a short id. */
export function recordTitle(meta: EntityMeta, record: Row): string {
  const named = meta.title_field ? record[meta.title_field] : null;
  if (named !== null && named !== undefined && named !== "") return String(named);
  const key = meta.fields.find((f) => f.natural_key)?.name;
  if (key && record[key]) return String(record[key]);
  return `${meta.title} ${String(record.id).slice(0, 8)}`;
}

const refKey = (app: AppDetail, ref: string | undefined) => (ref && !ref.includes("/") ? `${app.name.split("/")[0]}/${ref}` : ref ?? "");

/** The app's page listing ``entity`` (a Table or Listing of it, not a record page), if any. */
export function listPageOf(app: AppDetail, entity: string): PageMeta | null {
  return app.pages.find((p) => !(p.route ?? "").includes(":") && p.blocks.some((b) => {
    const c = app.components[refKey(app, b.ref)];
    return (c?.kind === "table" || c?.kind === "listing") && c.entity === entity;
  })) ?? null;
}

/** The entity a record page (route with ``:id``) shows, from its form block. */
export function recordEntityOf(app: AppDetail, page: PageMeta): string | null {
  if (!(page.route ?? "").includes(":")) return null;
  for (const b of page.blocks) {
    const c = app.components[refKey(app, b.ref)];
    if (c?.kind === "form") return c.entity;
  }
  return null;
}

/** The app's record page of ``entity`` (a route with ``:id`` showing its form), if any. */
export function recordPageOf(app: AppDetail, entity: string): PageMeta | null {
  return app.pages.find((p) => recordEntityOf(app, p) === entity) ?? null;
}

/** The page whose route takes an id and which shows ``formRef``: where a table's rows open. */
export function formPage(app: AppDetail, formRef: string | undefined): string | null {
  if (!formRef) return null;
  const page = app.pages.find((p) => (p.route ?? "").includes(":") && p.blocks.some((b) => b.ref && (b.ref === formRef || formRef.endsWith(`/${b.ref}`))));
  return page?.name ?? null;
}
