// The shapes of the UI metadata (GET /{ws}/_ui/_meta/…; docs/server.md "UI metadata"). Types only,
// and this module imports nothing: every other module may import it, so no import circle passes here.

/** How far a consuming app's grant for one service goes (issue 47). */
export type GrantMeta = {
  service: string;
  owner: string;
  owner_title: string;
  asked: string[];
  status: "pending" | "granted" | "refused" | "revoked" | "not_requested";
  granted: string[];
};

export type Option = { value: string | number | boolean; label: string };
export type FieldMeta = {
  name: string;
  /** A file field's accepted MIME types (``storage.accept``). */
  accept?: string[];
  caption: string | null;
  help: string | null;
  type: string;
  required: boolean;
  read_only: boolean;
  immutable: boolean;
  masked: boolean;
  multiple: boolean;
  default: unknown;
  options?: Option[];
  scale?: number | null;
  currency?: string;
  relation?: { entity: string; display_field: string | null };
  child?: {
    storage: string;
    fields: FieldMeta[];
    sequence_field: string | null;
    picker?: { entity: string; map: Record<string, string>; multiple: boolean };
  };
  visible_when?: string;
  required_permission?: string;
  readonly_when?: string;
  required_when?: string;
  computed?: { formula: string };
  auto_fill?: { from: string; field: string };
  /** UI only: the related fields a picker fetches for auto_fill. */
  fill?: string[];
  natural_key?: { entry: string };
};
export type FilterSpec = {
  field: string;
  label?: string;
  type?: "text" | "select" | "date" | "date_range";
  op?: string;
  value?: unknown;
  default?: unknown;
  from?: string;
  attr?: string;
  all_label?: string;
  show_all?: boolean;
};
export type ActionMeta = {
  name: string;
  description: string | null;
  required_permission: string | null;
  ui: { button_label?: string; confirm?: string; style?: string; show_when?: string } | null;
  conditions: { script?: string; message?: string; expression?: string }[];
};
export type GateStep = { name: string; title: string; mode: string; approvers: number; roles: string[]; permission: string | null; display_fields: string[] };
export type Gate = { steps: GateStep[]; on_reject: string | null; allow_self_approval: boolean };
export type Transition = { name: string; action: string; from: string[]; to: string; approval: Gate | null };
/** An approval as the API answers it (docs/workflows.md "Approval gates"). */
export type Approval = {
  id: string;
  entity: string;
  record_id: string;
  action: string;
  transition: string;
  to: string;
  status: "pending" | "approved" | "rejected" | "cancelled";
  /** The current step; null once the approval is closed. */
  step: { index: number; name: string; title: string; approvers: number; votes: number; roles: string[]; permission: string | null; escalated: boolean } | null;
  requested_by: string | null;
  created_at: string;
  decided_at: string | null;
  display?: Record<string, unknown>;
  history?: { event: string; at: string; step?: string; by?: string; comment?: string | null }[];
};
export type EntityMeta = {
  name: string;
  title: string;
  lifecycle: boolean;
  rest: string[];
  api: string | null;
  fields: FieldMeta[];
  filters: FilterSpec[];
  actions: ActionMeta[];
  state_machine: { field: string; states: string[]; initial: string; transitions: Transition[] } | null;
  runnable: string[];
  /** The field people know a record by (headings, breadcrumbs, tabs); null: the id. */
  title_field?: string | null;
  /** One-to-many relations into this entity: the related lists of a record's page. */
  related?: { entity: string; field: string; title: string }[];
  /** The transaction date accounting periods judge (issue 43); null or absent: none. */
  period_field?: string | null;
};
/** An accounting period as ``GET api/_periods`` answers it (docs/server.md "Periods"). */
export type Period = {
  id: string;
  name: string;
  starts: string;
  ends: string;
  state: "open" | "closing" | "closed";
  final: boolean;
  closed_at: string | null;
  closed_by: string | null;
  reason: string | null;
};
export type TableComp = {
  kind: "table";
  entity: string;
  title?: string;
  columns: { field: string; label?: string; sortable?: boolean }[];
  filters: FilterSpec[];
  fixed_filters: FilterSpec[];
  sort?: string;
  page_size: number;
  form?: string;
};
export type FormComp = {
  kind: "form";
  entity: string;
  title?: string;
  fields: { field: string; label?: string; help?: string; readonly?: boolean; hidden?: boolean; default_from?: string }[];
  actions: { action: string; label?: string; confirm?: string; style?: string }[];
  confirm?: { create?: string; update?: string; delete?: string };
};
export type KanbanComp = {
  kind: "kanban";
  entity: string;
  title?: string;
  group_by: string;
  card_fields: string[];
  filters: FilterSpec[];
};
export type ListingComp = { kind: "listing"; entity: string; title?: string; fields: string[]; filters: FilterSpec[] };
export type InboxComp = { kind: "approval_inbox"; title?: string; entities: string[] };
export type Widget = {
  ref: string;
  layout: { x: number; y: number; w: number; h: number };
  config?: { kind?: "number" | "chart" | "list"; label?: string; filters?: Record<string, string>; group_by?: string; limit?: number };
};
export type DashboardComp = { kind: "dashboard"; title?: string; widgets: Widget[] };
export type Component = TableComp | FormComp | KanbanComp | ListingComp | InboxComp | DashboardComp;
export type WorkspaceLook = {
  slug: string;
  title: string | null;
  theme: Record<string, string> | null;
  logo: string | null;
  favicon: string | null;
};
export type Block = {
  id?: string;
  ref?: string;
  asset?: string;
  mode?: "view" | "edit";
  binds?: { source: string; param: string };
  /** A table's or listing's fixed list parameters (templates over the page's contexts). */
  param?: Record<string, unknown>;
  props?: Record<string, unknown>;
};
/** A page context as the metadata declares it (resolved by contexts.ts). */
export type ContextDecl = {
  name: string;
  source: "session" | "entity" | "api" | "const" | "expr";
  call?: string;
  config?: string;
  entity?: string;
  expr?: string;
  fallback?: unknown;
  id?: string;
  params?: Record<string, unknown>;
  realtime?: boolean;
  value?: unknown;
};

export type PageMeta = { name: string; title?: string; route?: string; layout: string; blocks: Block[]; context?: ContextDecl[] };
export type Chrome = {
  nav?: string; brand?: string; breadcrumbs?: string; footer?: string; theme_switcher?: string;
  regions?: Record<string, string>;
};
export type AppSummary = { name: string; title: string; home: string | null; pages: string[]; icon: string | null };
export type AppDetail = Omit<AppSummary, "pages"> & {
  pages: PageMeta[];
  components: Record<string, Component>;
  chrome?: Chrome;
  confirm?: { create?: string; update?: string; delete?: string };
  /** The path prefix of the app's service calls (``api/_apps/{module}/{app}``): the server
   * attributes a call to the app by it and checks the owner's grant. */
  through?: string;
  /** What the app consumes of other apps' services, and how far each owner granted it. */
  grants?: GrantMeta[];
};
export type Me = {
  username: string;
  roles: string[];
  permissions: Record<string, boolean>;
  /** Holds a saga action's resolve permission: the shell links to the saga inbox (``#/sagas``). */
  resolves_sagas?: boolean;
};
export type Row = Record<string, unknown>;
