// Grants between apps (issue 47): what an app consumes of another app's service and how far the
// owner granted it (``grants`` of the app's metadata, ``GET /{ws}/_ui/_meta/apps/{module}/{app}``).
// Pure: a page asks which of its contexts call an action that is not granted (they are not run)
// and which blocks use those contexts (they are disabled, saying why); ``views/page.ts`` shows it.
import { type ContextDecl, callOf } from "./contexts";
import type { GrantMeta } from "./meta";

export type { GrantMeta };

const STATES: Record<string, string> = {
  pending: "has not yet decided on",
  refused: "refused",
  revoked: "revoked",
  not_requested: "has not been asked for",
};

/** Why ``decl`` may not run in the app titled ``appTitle``: it calls an action of a service another
 * app owns that the owner has not granted. Null when it may run (not a call, a service no other
 * app owns, or a granted action). */
export function missingGrant(decl: ContextDecl, grants: GrantMeta[], appTitle: string): string | null {
  if (decl.source !== "api" || !decl.call) return null;
  const parts = callOf(decl.call);
  if (!parts) return null;
  const [module, service, action] = parts;
  const grant = grants.find((g) => g.service === `${module}/${service}`);
  if (!grant || grant.granted.includes(action)) return null;
  const state = grant.status === "granted"
    ? `granted ${appTitle} other actions of ${grant.service}, not ${action}`
    : `${STATES[grant.status] ?? grant.status} the access of ${appTitle} to ${action} of ${grant.service}`;
  return `${grant.owner_title} ${state}; an administrator of ${grant.owner_title} decides it among the grant requests.`;
}

/** The page's contexts that may not run, by name, with why. */
export function blockedContexts(decls: ContextDecl[], grants: GrantMeta[], appTitle: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const decl of decls) {
    const why = missingGrant(decl, grants, appTitle);
    if (why) out[decl.name] = why;
  }
  return out;
}

/** Why a block may not show: its ``props`` or ``param`` use (``{context.<name>…}``) a context that
 * may not run. Null when nothing it uses is blocked. */
export function blockedBlock(block: { props?: unknown; param?: unknown }, blocked: Record<string, string>): string | null {
  const text = JSON.stringify([block.props ?? null, block.param ?? null]);
  for (const [name, why] of Object.entries(blocked)) {
    if (text.includes(`{context.${name}}`) || text.includes(`{context.${name}.`)) return why;
  }
  return null;
}
