// The server, as the UI sees it: the workspace from the URL, the token, JSON calls and problem
// documents (RFC 9457) turned into errors that carry their field paths.

export type FieldProblem = { path: string; message: string };
export class Problem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    readonly errors: FieldProblem[] = [],
  ) {
    super(detail || code || `HTTP ${status}`);
  }
}

/** The workspace slug: the first path segment (``/acme/`` → ``acme``). */
export function workspaceOf(pathname: string): string {
  return pathname.split("/").filter(Boolean)[0] ?? "default";
}

export const workspace = typeof location === "undefined" ? "default" : workspaceOf(location.pathname);
const TOKEN_KEY = `dap.token.${workspace}`;

export const session = {
  get token(): string | null {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  set token(value: string | null) {
    if (value === null) sessionStorage.removeItem(TOKEN_KEY);
    else sessionStorage.setItem(TOKEN_KEY, value);
  },
  /** The username of the token (its claims are read, never trusted: the server checks them). */
  get username(): string | null {
    const token = this.token;
    if (!token) return null;
    try {
      const body = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const claims = JSON.parse(atob(body)) as { username?: string; preferred_username?: string; email?: string };
      return claims.username ?? claims.preferred_username ?? claims.email ?? null; // local, then ID tokens
    } catch {
      return null;
    }
  },
};

export type Answer<T> = { data: T; total?: number; status: number; headers: Headers; raw: Record<string, unknown> };

/** A call to the API. ``body`` is sent as JSON, but a ``Blob`` (a chosen file) as its own bytes
 * under the caller's ``Content-Type``, so a file upload answers and fails like any other write. */
export async function call<T>(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer<T>> {
  const h: Record<string, string> = { Accept: "application/json", ...headers };
  if (session.token) h.Authorization = `Bearer ${session.token}`;
  const bytes = typeof Blob !== "undefined" && body instanceof Blob;
  if (body !== undefined && !bytes) h["Content-Type"] = "application/json";
  const response = await fetch(`/${workspace}/${path}`, {
    method,
    headers: h,
    body: body === undefined ? undefined : bytes ? body : JSON.stringify(body),
  });
  if (response.status === 204) return { data: undefined as T, status: 204, headers: response.headers, raw: {} };
  const text = await response.text();
  const json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
  if (!response.ok) {
    if (response.status === 401 && session.token && !path.startsWith("_ui/")) {
      session.token = null;
      location.hash = "#/login";
    }
    throw new Problem(
      response.status,
      String(json.code ?? ""),
      String(json.detail ?? json.title ?? response.statusText),
      (json.errors as FieldProblem[] | undefined) ?? [],
    );
  }
  const data = ("data" in json ? json.data : json) as T;
  return { data, total: json.total as number | undefined, status: response.status, headers: response.headers, raw: json };
}

export const get = <T>(path: string) => call<T>("GET", path);

/** A write at a version that is no longer the record's (412, ``SVC.VERSION.MISMATCH``): someone
 * else saved in between. Every write the form makes (Save, actions, a file's Replace or Remove)
 * tells it the same way, with Reload. */
export function isStale(e: unknown): boolean {
  return e instanceof Problem && e.status === 412;
}
