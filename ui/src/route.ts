// Hash routes inside one workspace's page: the server serves the bundle at /{ws}/ only.
//   #/setup  #/login  #/signed-in (after a provider's callback)
//   #/forgot  #/reset?token=…  #/password (change it, signed in)  #/                      (the first app's home)
//   #/a/{module}/{app}/{page}[/{id}]          (a page; {id} fills its route's :id)
//   #/sagas[/{id}]                             (the parked sagas; one saga's timeline)
//   #/periods                                  (the workspace's accounting periods)

export type Route =
  | { kind: "setup" }
  | { kind: "login" }
  | { kind: "signed-in" }
  | { kind: "forgot" }
  | { kind: "reset"; token: string }
  | { kind: "password" }
  | { kind: "sagas"; id: string | null }
  | { kind: "periods" }
  | { kind: "home" }
  | { kind: "page"; app: string; page: string; id: string | null; query: URLSearchParams };

export function parseRoute(hash: string): Route {
  const [path, search = ""] = hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const query = new URLSearchParams(search);
  if (parts[0] === "setup") return { kind: "setup" };
  if (parts[0] === "login") return { kind: "login" };
  if (parts[0] === "signed-in") return { kind: "signed-in" };
  if (parts[0] === "forgot") return { kind: "forgot" };
  if (parts[0] === "reset") return { kind: "reset", token: query.get("token") ?? "" };
  if (parts[0] === "password") return { kind: "password" };
  if (parts[0] === "sagas") return { kind: "sagas", id: parts[1] ?? null };
  if (parts[0] === "periods") return { kind: "periods" };
  if (parts[0] === "a" && parts.length >= 4)
    return { kind: "page", app: `${parts[1]}/${parts[2]}`, page: parts[3], id: parts[4] ?? null, query };
  return { kind: "home" };
}

export function pageHref(app: string, page: string, id?: string | null, query?: URLSearchParams): string {
  const base = `#/a/${app}/${page.split("/").pop()}${id ? `/${encodeURIComponent(id)}` : ""}`;
  const q = query?.toString();
  return q ? `${base}?${q}` : base;
}
