// AppChrome: skip link, brand, nav of the app's pages, breadcrumbs, theme switcher, sign-out, footer.
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { session, workspace } from "../api";
import { html } from "../html";
import type { AppDetail, AppSummary, Me, PageMeta, WorkspaceLook } from "../meta";
import { pageHref } from "../route";
import { sagaInboxLink } from "../sagas";
import { NotificationsButton } from "./notifications";
import { HeaderSearch } from "./search";
import { Toasts } from "./toasts";
import { listPageOf, recordEntityOf } from "../titles";

export type Theme = "light" | "dark";
const THEME_KEY = "dap.theme";

export function initialTheme(): Theme {
  const saved = localStorage.getItem(THEME_KEY);
  if (saved === "light" || saved === "dark") return saved;
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

export function applyTheme(theme: Theme): void {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem(THEME_KEY, theme);
}

/**
 * The workspace's look as data: ``theme`` keys become CSS custom properties (``accent`` →
 * ``--accent``; ``dark.accent`` only in the dark theme), ``favicon`` replaces the icon.
 */
export function applyLook(look: WorkspaceLook | null): void {
  if (!look) return;
  const rules: string[] = [];
  const light: string[] = [];
  const dark: string[] = [];
  for (const [key, value] of Object.entries(look.theme ?? {})) {
    if (typeof value !== "string" || !/^[a-z][a-z0-9-]*$/.test(key.replace(/^dark\./, ""))) continue;
    const safe = value.replace(/[;{}<>]/g, "");
    (key.startsWith("dark.") ? dark : light).push(`--${key.replace(/^dark\./, "")}: ${safe};`);
  }
  if (light.length) rules.push(`:root { ${light.join(" ")} }`);
  if (dark.length) rules.push(`:root[data-theme="dark"] { ${dark.join(" ")} }`);
  let style = document.getElementById("workspace-theme");
  if (!style) {
    style = document.createElement("style");
    style.id = "workspace-theme";
    document.head.append(style);
  }
  style.textContent = rules.join("\n");
  if (look.favicon) document.getElementById("favicon")?.setAttribute("href", look.favicon);
}

/** The crumb between the app and a record: a record page's crumb opens its entity's list (never a
 * blank "New" form); a list page's crumb is the page itself. */
function entityCrumb(app: AppDetail, page: PageMeta, crumb: string | null) {
  const entity = recordEntityOf(app, page);
  if (entity) {
    const list = listPageOf(app, entity);
    return list
      ? html`<li><a href=${pageHref(app.name, list.name)}>${list.title ?? list.name}</a></li>`
      : html`<li>${page.title ?? page.name}</li>`;
  }
  return html`<li><a href=${pageHref(app.name, page.name)} aria-current=${crumb ? undefined : "page"}>${page.title ?? page.name}</a></li>`;
}

const shown = (toggle: string | undefined) => toggle !== "hide";

type Props = {
  apps: AppSummary[];
  look: WorkspaceLook | null;
  app: AppDetail;
  page: PageMeta | null;
  crumb: string | null;
  children: ComponentChildren;
  onSignOut: () => void;
  /** A chrome region's component (``chrome.regions``: a component reference), rendered. */
  region: (name: string, ref: string) => ComponentChildren;
  /** The caller (the nav links to the saga inbox for whoever may resolve a saga). */
  me?: Me | null;
};

const REGION_OFF = new Set(["none", "auto"]);

export function Shell({ apps, look, app, page, crumb, children, onSignOut, region, me = null }: Props) {
  const chrome = app.chrome ?? {};
  const regions = chrome.regions ?? {};
  const named = (name: string) => (regions[name] && !REGION_OFF.has(regions[name]) ? region(name, regions[name]) : null);
  const [theme, setTheme] = useState<Theme>(initialTheme());
  const [menuOpen, setMenuOpen] = useState(false);
  const toggleTheme = () => {
    const next = theme === "dark" ? "light" : "dark";
    applyTheme(next);
    setTheme(next);
  };
  const navPages = app.pages.filter((p) => !(p.route ?? "").includes(":"));
  const inbox = sagaInboxLink(me);
  return html`<div class="shell">
    <a class="skip" href="#main" onClick=${(e: Event) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>Skip to content</a>
    ${regions.topbar !== "none" && html`<header class="topbar">
      ${shown(chrome.brand) && html`<a class="brand" href=${pageHref(app.name, app.home ?? navPages[0]?.name ?? "")}>${look?.logo ? html`<img src=${look.logo} alt="" height="24" />` : ""}${app.title}</a>`}
      ${chrome.nav !== "none" && html`<button class="menu-toggle" aria-expanded=${menuOpen} aria-controls="nav" onClick=${() => setMenuOpen(!menuOpen)}>Menu</button>
        <nav id="nav" aria-label="Pages" class=${menuOpen ? "open" : ""}>
          <ul>
            ${navPages.map((p) => html`<li><a href=${pageHref(app.name, p.name)} aria-current=${page?.name === p.name ? "page" : undefined}>${p.title ?? p.name}</a></li>`)}
            ${apps.filter((a) => a.name !== app.name).map((a) => html`<li><a href=${`#/a/${a.name}/${(a.home ?? a.pages[0] ?? "").split("/").pop()}`}>${a.title}</a></li>`)}
            ${inbox && html`<li><a href=${inbox.href}>${inbox.label}</a></li>`}
            <li><a href="#/periods">Periods</a></li>
          </ul>
        </nav>`}
      <div class="tools">
        <${HeaderSearch} app=${app} />
        <${NotificationsButton} app=${app} />
        ${shown(chrome.theme_switcher) && html`<button onClick=${toggleTheme} aria-pressed=${theme === "dark"} title="Switch light and dark theme">${theme === "dark" ? "Light theme" : "Dark theme"}</button>`}
        <span class="user">${session.username}</span>
        <button onClick=${onSignOut}>Sign out</button>
      </div>
    </header>`}
    ${named("topbar")}
    ${shown(chrome.breadcrumbs) && page && html`<nav class="crumbs" aria-label="Breadcrumbs"><ol>
      <li><a href=${pageHref(app.name, app.home ?? page.name)}>${app.title}</a></li>
      ${entityCrumb(app, page, crumb)}
      ${crumb && html`<li aria-current="page">${crumb}</li>`}
    </ol></nav>`}
    <div class="frame">
      ${named("sidebar")}
      <main id="main" tabindex="-1">${children}</main>
      ${named("rightbar")}
    </div>
    ${named("bottombar")}
    <${Toasts} />
    ${shown(chrome.footer) && regions.footer !== "none" && html`<footer>${named("footer") ?? html`${look?.title ?? workspace} · ${app.title}`}</footer>`}
  </div>`;
}
