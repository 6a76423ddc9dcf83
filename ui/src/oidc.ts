// Sign-in through the workspace's OpenID providers. The server runs the authorization code flow
// (PKCE, state, nonce) and keeps the provider's tokens; the browser holds only an HttpOnly cookie
// for that session. After the callback (#/signed-in) the UI claims the ID token with a POST, uses it
// as its bearer token, renews it a minute before it expires and ends the session on sign-out.
import { call, session, workspace } from "./api";

export type Provider = { name: string; title: string };
type Claimed = { token: string; expires_at: number; provider: string };

const MARK = `dap.oidc.${workspace}`; // the provider of the current session, when there is one
const EARLY = 60; // seconds before expiry to renew
let timer: ReturnType<typeof setTimeout> | undefined;

export async function listProviders(): Promise<Provider[]> {
  try {
    return (await call<Provider[]>("GET", "_ui/providers")).data;
  } catch {
    return [];
  }
}

export function startHref(provider: string): string {
  return `/${workspace}/_ui/oidc/${encodeURIComponent(provider)}/start`;
}

function keep(answer: Claimed): void {
  session.token = answer.token;
  sessionStorage.setItem(MARK, answer.provider);
  sessionStorage.setItem(`${MARK}.exp`, String(answer.expires_at));
  schedule(answer.expires_at);
}

function schedule(expiresAt: number): void {
  clearTimeout(timer);
  const wait = Math.max(0, expiresAt - EARLY - Date.now() / 1000) * 1000;
  timer = setTimeout(() => void renew(), wait);
}

/** After the provider's callback: the session's ID token becomes the UI's token. */
export async function claim(): Promise<void> {
  keep((await call<Claimed>("POST", "_ui/oidc/session", {})).data);
}

/** A fresh ID token through the provider's refresh token; on failure the user signs in again. */
export async function renew(): Promise<void> {
  try {
    keep((await call<Claimed>("POST", "_ui/oidc/refresh", {})).data);
  } catch {
    forget();
    location.hash = "#/login";
  }
}

function forget(): void {
  clearTimeout(timer);
  session.token = null;
  sessionStorage.removeItem(MARK);
  sessionStorage.removeItem(`${MARK}.exp`);
}

/** Ends a provider session; answers the provider's logout URL when it has one (RP-initiated logout). */
export async function signOut(): Promise<string | null> {
  if (!sessionStorage.getItem(MARK)) return null;
  forget();
  try {
    return (await call<{ end_session_url: string | null }>("POST", "_ui/oidc/logout", {})).data.end_session_url;
  } catch {
    return null;
  }
}

// a reload keeps the session: renew on the same schedule
const exp = Number(typeof sessionStorage === "undefined" ? 0 : sessionStorage.getItem(`${MARK}.exp`) ?? 0);
if (exp && session.token) schedule(exp);
