"""UI metadata: what a front end needs to render the apps, pages and entity forms of a workspace.

The spec names ``GET /{ws}/_ui/_meta/apps`` and leaves the payloads open; they are designed here
and documented in docs/server.md:

* ``GET /{ws}/_ui/_meta/apps`` → ``{"data": [AppSummary]}``
* ``GET /{ws}/_ui/_meta/apps/{module}/{app}`` → ``{"data": AppDetail}`` (pages resolved; ``through``
  the path prefix its service calls take, ``grants`` what it consumes of other apps and how far
  each owner granted it: the one workspace datum here, about apps, never about records)
* ``GET /{ws}/_ui/_meta/entities/{module}/{entity}`` → ``{"data": EntityMeta}`` (fields with
  captions, help, types, options; each action says how it is called: ``call``, ``track``, ``callback``)
* ``GET /{ws}/_ui/_meta/services/{module}/{service}`` → ``{"data": ServiceMeta}`` (a service
  exposed over REST: its runnable actions with params as fields, ``public``, ``call``, and the
  ``api`` and ``jobs`` paths)

Metadata describes the spec, never tenant data, and the UI needs it before anyone has logged in
(to draw the login and setup pages), so these endpoints need a registered workspace but no
token. Fields excluded from the ``ui`` surface are left out.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dap.config.actions import Action
from dap.config.apps import AppSpec
from dap.config.entities import ApprovalSpec, EntitySpec
from dap.config.enums import Characteristic, NaturalKeyEntry
from dap.config.fields import Field
from dap.server import errors, fieldvalues, state
from dap.server.access import periods as period_rule
from dap.server.catalog import Catalog, Resource, machines
from dap.server.storage import db, numbering, tables
from dap.server.web import requests, ui_titles
from dap.server.workflows import actions, granting, saga_decisions, sidecars

UI_SURFACE = "ui"


def _ref(ref: str, module: str) -> str:
    return tables.resolve_ref(ref, module)


def field_meta(f: Field, module: str, catalog: Catalog) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f.name,
        "caption": f.caption,
        "help": f.description,
        "type": str(f.type),
        "required": f.required,
        "read_only": f.read_only or f.computed is not None,
        "immutable": f.immutable,
        "unique": f.unique,
        "masked": f.masked,
        "multiple": bool(f.multiple),
        "default": f.default,
    }
    if f.options:
        meta["options"] = [
            {"value": o.value, "label": o.label or fieldvalues.to_json(f, o.value)} for o in f.options
        ]
    elif f.enum_values:
        meta["options"] = [{"value": v, "label": v.replace("_", " ").capitalize()} for v in f.enum_values]
    if f.scale_digits is not None or f.precision is not None:
        meta["precision"] = f.precision
        meta["scale"] = f.scale_digits
    if f.currency:
        meta["currency"] = f.currency
    if f.storage is not None and f.storage.accept:  # a file input offers these types
        meta["accept"] = list(f.storage.accept)
    if f.relation is not None:
        meta["relation"] = {
            "entity": _ref(f.relation.entity, module),
            "display_field": f.relation.display_field,
        }
    if f.child is not None:
        meta["child"] = {
            "storage": str(f.child.storage),
            "fields": [
                field_meta(c, module, catalog)
                for c in tables.child_fields(f, module, catalog.entities)
                if UI_SURFACE not in c.exclude and not c.removed
            ],
        }
        meta["child"].update(_child_extras(f, module))
    if f.required_permission:  # callers without it never see the field (the UI leaves it out)
        meta["required_permission"] = f.required_permission
    if f.visible_when:
        meta["visible_when"] = f.visible_when
    if f.readonly_when:
        meta["readonly_when"] = f.readonly_when
    meta.update(_derived(f))
    return meta


def _child_extras(f: Field, module: str) -> dict[str, Any]:
    """``sequence_field`` and ``picker`` of a child field (the UI fills rows by picking records)."""
    assert f.child is not None
    out: dict[str, Any] = {"sequence_field": f.child.sequence_field}
    picker = f.child.picker
    if picker is not None:
        out["picker"] = {
            "entity": _ref(picker.entity, module),
            "map": dict(picker.map),
            "multiple": picker.multiple,
            "filters": [{"entity": _ref(x.entity, module), "field": x.field} for x in picker.filters],
        }
    return out


def _derived(f: Field) -> dict[str, Any]:
    """What the server derives or checks on a field, for forms to mirror (the server decides)."""
    out: dict[str, Any] = {}
    if f.required_when:
        out["required_when"] = f.required_when
    if f.computed is not None:
        out["computed"] = {"formula": f.computed.formula}
    if f.auto_fill is not None:
        out["auto_fill"] = {"from": f.auto_fill.from_, "field": f.auto_fill.field}
    key = numbering.key_of(f)
    if key is not None:
        out["natural_key"] = {"entry": str(key.entry), "pattern": key.pattern, "reset": key.reset}
        if key.entry is NaturalKeyEntry.ENGINE:  # a client value is refused
            out["read_only"] = True
    if f.rules:
        out["rules"] = [r.model_dump(mode="json", exclude_none=True) for r in f.rules]
    return out


def _verbs(spec: EntitySpec, resource: Resource | None) -> list[str]:
    """The REST verbs a UI may offer: a summary is read-only (the engine writes it; a write would be
    409 ``SVC.PERSIST.CROSS_CATEGORY``), so its forms show no create, edit or delete."""
    if resource is None:
        return []
    if spec.characteristic is Characteristic.SUMMARY:
        return sorted(a for a in resource.actions if a in ("list", "find"))
    return sorted(resource.actions)


def entity_meta(catalog: Catalog, key: str, *, bridged: bool = False) -> dict[str, Any]:
    spec = catalog.entities[key]
    module, name = key.split("/", 1)
    resource = catalog.resources.get(key)
    return {
        "name": key,
        "module": module,
        "entity": name,
        "title": catalog.titles.get(key, name),
        "description": spec.description,
        "characteristic": str(spec.characteristic),
        "lifecycle": spec.lifecycle,
        "rest": _verbs(spec, resource),
        "api": f"api/{module}/{name}" if resource is not None else None,
        "fields": [
            field_meta(f, module, catalog)
            for f in spec.fields
            if not f.removed and UI_SURFACE not in f.exclude
        ],
        "extensions": [
            {
                "namespace": ns,
                "fields": [field_meta(f, module, catalog) for f in ext if UI_SURFACE not in f.exclude],
            }
            for ns, ext in (resource.extensions.items() if resource is not None else ())
        ],
        "filters": [fl.model_dump(mode="json", by_alias=True, exclude_none=True) for fl in spec.filters],
        "actions": [
            {
                "name": a.name,
                "description": a.description,
                "required_permission": a.required_permission,
                "ui": a.ui.model_dump(mode="json", exclude_none=True) if a.ui else None,
                "conditions": [c.model_dump(mode="json", exclude_none=True) for c in a.conditions],
                **_calling(a),
            }
            for a in spec.actions
            if not a.disabled
        ],
        "state_machine": _machine(spec, resource),
        "runnable": _runnable(key, resource, bridged),
        "title_field": ui_titles.title_field(catalog, key),
        "related": ui_titles.related(catalog, key),
        # the date a period judges (access.periods, the one rule): the form reads a record dated
        # in a closed period (GET api/_periods) as read-only instead of offering refused writes
        "period_field": period_rule.field_of(spec),
    }


def _calling(a: Action) -> dict[str, Any]:
    """How an action is called: synchronously, or as a (tracked) job, with or without a callback."""
    return {"call": str(a.call), "track": a.track, "callback": a.callback is not None}


def service_meta(catalog: Catalog, key: str, *, bridged: bool = False) -> dict[str, Any]:
    """A service exposed over REST and its actions (params as fields), for forms that call them;
    ``runnable`` names those this server runs (sidecar ones only when ``bridged``)."""
    service = catalog.services[key]
    return {
        "name": key,
        "module": service.module,
        "service": service.name,
        "title": service.title,
        "description": service.description,
        "api": f"api/{service.module}/{service.name}",
        "jobs": f"api/{service.module}/{service.name}/_jobs",
        "actions": [
            {
                "name": name,
                "description": a.description,
                "public": a.public,
                "required_permission": a.required_permission,
                "ui": a.ui.model_dump(mode="json", exclude_none=True) if a.ui else None,
                "params": [field_meta(f, service.module, catalog) for f in plan.params.values()],
                "conditions": [c.model_dump(mode="json", exclude_none=True) for c in a.conditions],
                **_calling(a),
            }
            for name, plan in sorted(service.actions.items())
            if (a := plan.declared) is not None and not a.disabled and (not a.expose or "rest" in a.expose)
        ],
        "runnable": sorted(
            name for name, plan in service.actions.items() if actions.runs_here(key, plan, bridged=bridged)
        ),
    }


def _runnable(key: str, resource: Resource | None, bridged: bool) -> list[str]:
    """The custom actions and transitions this server runs (the rest answer 501: a UI hides them);
    ``bridged``: an app process is attached, so sidecar actions run."""
    workflow = resource.workflow.items() if resource is not None else ()
    return sorted(name for name, plan in workflow if actions.runs_here(key, plan, bridged=bridged))


def _machine(spec: EntitySpec, resource: Resource | None) -> dict[str, Any] | None:
    """States and transitions, so that a UI can show the state and offer the actions that can run
    from it (``field`` names the record's field holding it; ``params`` each action's inputs)."""
    m = spec.state_machine
    if m is None:
        return None
    workflow = resource.workflow if resource is not None else {}
    return {
        "field": machines.STATE,
        "states": list(m.states),
        "initial": machines.initial_of(m),
        "transitions": [
            {
                "name": t.name,
                "action": t.action or t.name,
                "from": list(t.origins),
                "to": t.to,
                "approval": _gate(t.approval),
                "params": [p.name for p in workflow[t.action or t.name].params.values()]
                if (t.action or t.name) in workflow
                else [],
            }
            for t in m.transitions
        ],
    }


def _gate(spec: ApprovalSpec | None) -> dict[str, Any] | None:
    """An approval gate for a UI: its steps (who, how many, what to show) and ``on_reject``."""
    if spec is None:
        return None
    return {
        "steps": [
            {
                "name": s.name,
                "title": s.title or s.name,
                "mode": s.mode.value,
                "approvers": s.approvers,
                "roles": list(s.roles),
                "permission": s.permission,
                "display_fields": list(s.display_fields),
                "when": s.when,
                "escalation": {"after": s.escalation.after, "to_roles": list(s.escalation.to_roles)}
                if s.escalation
                else None,
            }
            for s in spec.steps
        ],
        "on_reject": spec.on_reject.to if spec.on_reject else None,
        "allow_self_approval": spec.allow_self_approval,
        "endpoints": {
            "inbox": "/api/_approvals",
            "approve": "/api/_approvals/{id}/approve",
            "reject": "/api/_approvals/{id}/reject",
        },
    }


def _inboxes(module: str, catalog: Catalog) -> list[dict[str, Any]]:
    """The module's ``ApprovalInbox`` views: title, entities and the list that serves each."""
    return [
        {
            "name": key,
            "title": inbox.title or key,
            "entities": list(inbox.entities),
            "endpoint": f"/api/_approvals?inbox={key}",
        }
        for key, inbox in sorted(catalog.inboxes.items())
        if key.split("/", 1)[0] == module
    ]


def _app_summary(key: str, catalog: Catalog) -> dict[str, Any]:
    app = catalog.apps[key]
    module, name = key.split("/", 1) if "/" in key else ("", key)
    return {
        "name": key,
        "module": module,
        "app": name,
        "title": app.title or name.replace("_", " ").capitalize(),
        "description": app.description,
        "access": str(app.access),
        "icon": app.icon,
        "home": _ref(app.home, module) if app.home else None,
        "pages": [_ref(p, module) for p in app.pages],
    }


def _region_blocks(app: AppSpec) -> dict[str, Any]:
    """``chrome.regions`` naming components, as a page's blocks: their components are answered too."""
    regions = app.chrome.regions if app.chrome is not None else None
    named = regions.model_dump(exclude_none=True).values() if regions is not None else ()
    return {"blocks": [{"ref": ref} for ref in named if ref not in ("none", "auto")]}


def _app_detail(key: str, catalog: Catalog) -> dict[str, Any]:
    app = catalog.apps[key]
    summary = _app_summary(key, catalog)
    pages = []
    for ref in summary["pages"]:
        page = catalog.pages.get(ref)
        if page is not None:
            pages.append({"name": ref, **page.model_dump(mode="json", by_alias=True, exclude_none=True)})
    dump = app.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        **summary,
        "pages": pages,
        "approval_inboxes": _inboxes(key.split("/", 1)[0], catalog),
        "components": _components([*pages, _region_blocks(app)], summary["module"], catalog),
        **{k: dump[k] for k in ("auth", "chrome", "confirm", "renderer") if k in dump},
    }


def _components(pages: list[dict[str, Any]], module: str, catalog: Catalog) -> dict[str, Any]:
    """The Table and Form manifests the pages' blocks name (and the forms those tables open),
    keyed ``module/name``, each with its ``kind``: a UI renders a page from this one answer."""
    out: dict[str, Any] = {}
    refs = [b["ref"] for p in pages for b in p.get("blocks", ()) if b.get("ref")]
    while refs:
        key = _ref(refs.pop(), module)
        if key in out:
            continue
        if key in catalog.views:
            view = catalog.views[key].model_dump(mode="json", by_alias=True, exclude_none=True)
            view["entity"] = _ref(view["entity"], key.split("/", 1)[0])
            out[key] = {"kind": "table", **view}
            if view.get("form"):
                refs.append(_ref(view["form"], key.split("/", 1)[0]))
        elif key in catalog.forms:
            form = catalog.forms[key].model_dump(mode="json", by_alias=True, exclude_none=True)
            form["entity"] = _ref(form["entity"], key.split("/", 1)[0])
            out[key] = {"kind": "form", **form}
        elif key in catalog.ui_parts:
            part = catalog.ui_parts[key]
            dump = part.model_dump(mode="json", by_alias=True, exclude_none=True)
            home = key.split("/", 1)[0]
            if "entity" in dump:
                dump["entity"] = _ref(dump["entity"], home)
            if "entities" in dump:
                dump["entities"] = [_ref(e, home) for e in dump["entities"]]
            for widget in dump.get("widgets", ()):
                widget["ref"] = _ref(widget["ref"], home)
                refs.append(widget["ref"])  # a widget naming a table or listing shows it
            out[key] = {"kind": _KINDS[type(part).__name__], **dump}
    return out


_KINDS = {
    "KanbanSpec": "kanban",
    "ListingSpec": "listing",
    "ApprovalInboxSpec": "approval_inbox",
    "DashboardSpec": "dashboard",
}


def _workspace_look(catalog: Catalog, slug: str) -> dict[str, Any]:
    """Title, theme, logo and favicon of the workspace: its Workspace manifest (by slug), else the
    spec's only one; the UI applies them as data (theme keys become CSS custom properties)."""
    spec = catalog.workspaces.get(slug)
    if spec is None and len(catalog.workspaces) == 1:
        spec = next(iter(catalog.workspaces.values()))
    if spec is None:
        return {"slug": slug, "title": None, "theme": None, "logo": None, "favicon": None}
    return {
        "slug": slug,
        "title": spec.title,
        "theme": spec.theme,
        "logo": spec.logo,
        "favicon": spec.favicon,
    }


def _permissions(catalog: Catalog) -> list[str]:
    """Every permission the spec names (actions, fields, backdating) and each entity's ``all_rows``."""
    named: set[str] = set()
    for key, spec in catalog.entities.items():
        named.add(key.replace("/", ".") + ".all_rows")
        named.update(a.required_permission for a in spec.actions if a.required_permission)
        named.update(f.required_permission for f in spec.fields if f.required_permission)
        if spec.backdate is not None and spec.backdate.override_permission:
            named.add(spec.backdate.override_permission)
    return sorted(named)


async def me(request: web.Request) -> web.Response:
    """The caller and which of the spec's permissions it holds (needs a token): the UI shows a
    button only when the API would allow its action (the server still decides)."""
    _, principal, catalog = await requests.resolve(request)
    held = {p: catalog.grants.allows(principal.roles, p) for p in _permissions(catalog)}
    sagas = saga_decisions.resolve_permissions(catalog)
    resolves = {p: catalog.grants.allows(principal.roles, p) for p in sagas}
    return web.json_response(
        {
            "data": {
                "username": principal.username,
                "roles": list(principal.roles),
                "permissions": held | resolves,
                "resolves_sagas": any(resolves.values()),  # the shell's link to the saga inbox
            }
        }
    )


async def _workspace(request: web.Request) -> Catalog:
    workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
    request[state.WORKSPACE] = workspace.slug
    return request.app[state.SPEC].current


async def apps(request: web.Request) -> web.Response:
    catalog = await _workspace(request)
    return web.json_response(
        {
            "data": [_app_summary(k, catalog) for k in sorted(catalog.apps)],
            "workspace": _workspace_look(catalog, request[state.WORKSPACE]),
        }
    )


async def app(request: web.Request) -> web.Response:
    catalog = await _workspace(request)
    key = f"{request.match_info['module']}/{request.match_info['app']}"
    if key not in catalog.apps:
        raise errors.NotFound(f"no app {key}", code="SVC.APP.NOT_FOUND")
    detail = _app_detail(key, catalog)
    # the UI calls services through the app (``web.grants``): the server attributes them by path
    detail["through"] = f"api/_apps/{key}"
    rows: list[dict[str, Any]] = []
    if any(o.app != key for o in catalog.offers.values()) and catalog.apps[key].consumes:
        workspace = await request.app[state.REGISTRY].resolve(request.match_info["ws"])
        async with db.connection(request.app[state.POOL]) as conn:
            rows = [
                r
                for r in await granting.listed(conn, workspace.tenant_id, None, None)
                if r["consumer"] == key
            ]
    detail["grants"] = granting.consumed(key, catalog, rows)
    return web.json_response({"data": detail})


async def entity(request: web.Request) -> web.Response:
    catalog = await _workspace(request)
    key = f"{request.match_info['module']}/{request.match_info['entity']}"
    if key not in catalog.entities:
        raise errors.NotFound(f"no entity {key}", code="SVC.ENTITY.NOT_FOUND")
    bridged = sidecars.INVOKER in request.app
    return web.json_response({"data": entity_meta(catalog, key, bridged=bridged)})


async def service(request: web.Request) -> web.Response:
    catalog = await _workspace(request)
    key = f"{request.match_info['module']}/{request.match_info['service']}"
    if key not in catalog.services:
        raise errors.NotFound(f"no service {key} is exposed over REST", code="SVC.SERVICE.NOT_FOUND")
    bridged = sidecars.INVOKER in request.app
    return web.json_response({"data": service_meta(catalog, key, bridged=bridged)})


def add_routes(application: web.Application) -> None:
    application.router.add_get("/{ws}/_ui/_meta/apps", apps)
    application.router.add_get("/{ws}/_ui/_meta/apps/{module}/{app}", app)
    application.router.add_get("/{ws}/_ui/_meta/entities/{module}/{entity}", entity)
    application.router.add_get("/{ws}/_ui/_meta/services/{module}/{service}", service)
    application.router.add_get("/{ws}/_ui/_meta/me", me)
