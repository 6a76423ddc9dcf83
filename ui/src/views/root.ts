// The router: setup and login without a token, app pages with one.
import { useEffect, useState } from "preact/hooks";
import { session, workspace } from "../api";
import { drop } from "../live";
import { useLoad } from "../hooks";
import { html } from "../html";
import { type Route, pageHref, parseRoute } from "../route";
import { appDetail, forgetSession, listApps, whoAmI } from "../store";
import { signOut as endProviderSession } from "../oidc";
import { ChangePassword, Forgot, Login, Reset, Setup, SignedIn } from "./auth";
import { PageView, RegionBlock } from "./page";
import { Periods } from "./periods";
import { Sagas } from "./sagas";
import { Shell, applyLook } from "./shell";

function useRoute(): Route {
  const [route, setRoute] = useState(parseRoute(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(location.hash));
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}

export function Root() {
  const route = useRoute();
  const [, setSignedIn] = useState(0);
  const apps = useLoad(listApps, []);
  const look = apps.value?.workspace ?? null;
  const title = look?.title ?? apps.value?.apps[0]?.title ?? workspace;
  useEffect(() => {
    document.title = title;
    applyLook(look);
  }, [title, look]);
  if (apps.error) return html`<main id="main" class="auth"><p class="error" role="alert">${apps.error.message}</p></main>`;
  if (!apps.value) return html`<main id="main" class="loading" aria-busy="true">Loading…</main>`;
  const home = () => {
    location.hash = "#/";
    setSignedIn((n) => n + 1); // also when the hash already was "#/"
  };
  if (route.kind === "signed-in") return html`<${SignedIn} onDone=${home} />`;
  if (route.kind === "forgot") return html`<${Forgot} title=${title} />`;
  if (route.kind === "reset") return html`<${Reset} title=${title} token=${route.token} />`;
  if (route.kind === "password" && session.token) return html`<${ChangePassword} title=${title} />`;
  if (route.kind === "setup") return html`<${Setup} title=${title} onDone=${home} />`;
  if (route.kind === "login" || !session.token) return html`<${Login} title=${title} onDone=${home} />`;
  if (route.kind === "sagas") return html`<${Sagas} id=${route.id} />`;
  if (route.kind === "periods") return html`<${Periods} />`;
  if (route.kind === "home") {
    const first = apps.value.apps[0];
    if (!first) return html`<main id="main"><p>This workspace has no app.</p></main>`;
    location.replace(pageHref(first.name, first.home ?? first.pages[0] ?? ""));
    return null;
  }
  return html`<${AppPage} route=${route} />`;
}

function AppPage({ route }: { route: Extract<Route, { kind: "page" }> }) {
  const loaded = useLoad(() => Promise.all([listApps(), appDetail(route.app), whoAmI()]), [route.app, session.token]);
  const [crumb, setCrumb] = useState<string | null>(null);
  if (loaded.error) return html`<main id="main"><p class="error" role="alert">${loaded.error.message}</p></main>`;
  if (!loaded.value) return html`<main id="main" aria-busy="true">Loading…</main>`;
  const [{ apps, workspace: look }, app, me] = loaded.value;
  const page = app.pages.find((p) => p.name === route.page || p.name.endsWith(`/${route.page}`)) ?? null;
  const signOut = async () => {
    const endUrl = await endProviderSession(); // a provider session ends on the server too
    session.token = null;
    forgetSession();
    drop(); // the socket carried the old token
    if (endUrl) location.assign(endUrl); // RP-initiated logout at the provider
    else location.hash = "#/login";
  };
  const region = (name: string, ref: string) => html`<${RegionBlock} app=${app} me=${me} name=${name} refName=${ref} />`;
  return html`<${Shell} apps=${apps} look=${look} app=${app} page=${page} crumb=${crumb} onSignOut=${signOut} region=${region} me=${me}>
    ${page
      ? html`<${PageView} key=${page.name + (route.id ?? "")} app=${app} page=${page} id=${route.id} query=${route.query} me=${me} setCrumb=${setCrumb} />`
      : html`<p class="error" role="alert">No page ${route.page} in ${app.title}.</p>`}
  <//>`;
}
