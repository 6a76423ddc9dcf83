// Metadata cache: one answer per app and entity for the life of the page.
import { get } from "./api";
import { stateLabel } from "./titles";
import type { AppDetail, AppSummary, EntityMeta, Me, WorkspaceLook } from "./meta";

const entities = new Map<string, Promise<EntityMeta>>();
const apps = new Map<string, Promise<AppDetail>>();
let appList: Promise<{ apps: AppSummary[]; workspace: WorkspaceLook | null }> | null = null;
let me: Promise<Me> | null = null;

/** A state machine's field gets its states as options, so lists, filters and badges all say
 * "Checked in" for ``checked_in``. */
function withStateLabels(meta: EntityMeta): EntityMeta {
  const machine = meta.state_machine;
  if (!machine) return meta;
  const fields = meta.fields.map((f) =>
    f.name === machine.field && !f.options ? { ...f, options: machine.states.map((s) => ({ value: s, label: stateLabel(s) })) } : f,
  );
  return { ...meta, fields };
}

export function entityMeta(name: string): Promise<EntityMeta> {
  let hit = entities.get(name);
  if (!hit) {
    hit = get<EntityMeta>(`_ui/_meta/entities/${name}`).then((a) => withStateLabels(a.data));
    entities.set(name, hit);
  }
  return hit;
}

export function appDetail(name: string): Promise<AppDetail> {
  let hit = apps.get(name);
  if (!hit) {
    hit = get<AppDetail>(`_ui/_meta/apps/${name}`).then((a) => a.data);
    apps.set(name, hit);
  }
  return hit;
}

/** The workspace's apps, and its title, theme, logo and favicon (data from its manifest). */
export function listApps(): Promise<{ apps: AppSummary[]; workspace: WorkspaceLook | null }> {
  appList ??= get<AppSummary[]>("_ui/_meta/apps").then((a) => ({
    apps: a.data,
    workspace: (a.raw.workspace as WorkspaceLook | undefined) ?? null,
  }));
  return appList;
}

export function whoAmI(): Promise<Me> {
  me ??= get<Me>("_ui/_meta/me").then((a) => a.data);
  return me;
}

export function forgetSession(): void {
  me = null;
}
