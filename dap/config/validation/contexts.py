"""Rules on a page's contexts (``Page.spec.context``, ContextDecl): what the UI resolves when the
page opens (docs/ui.md "Page contexts"), checked here so a mistake is a validation error with its
file and path instead of a fallback the author never sees.

Each context has an identifier name, unique in its page (templates say ``{context.<name>.…}``);
its source has what it reads (``entity`` for entity, ``expr`` for expr, ``call`` for api), the
entity and the service action exist; an expression parses and reads only ``session``, ``route``
and the contexts declared before it (they resolve in order); ``realtime`` and ``id`` belong to
entity contexts only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from dap.config import expressions
from dap.config import manifests as m
from dap.config.enums import ContextSource
from dap.config.errors import Problem
from dap.config.specs import Spec, qualify
from dap.config.validation import locating

NAME = re.compile(r"[a-z][a-z0-9_]*")
CALL = re.compile(r"([a-z][a-z0-9_]*)[./]([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)")
# Names an expression context reads besides the earlier contexts (contexts.ts ``resolveContexts``).
ROOTS = frozenset({"session", "route"})


def page_context_rules(spec: Spec) -> Iterator[Problem]:
    for page in spec.pages.values():
        module = page.metadata.module
        seen: set[str] = set()
        for i, decl in enumerate(page.spec.context):
            path = f"spec.context[{i}]"
            if not NAME.fullmatch(decl.name):
                yield locating.at(
                    spec, page, f"{path}.name", f"context name {decl.name!r} is not an identifier"
                )
            elif decl.name in seen:
                yield locating.at(spec, page, f"{path}.name", f"context {decl.name!r} is declared twice")
            entity = decl.source is ContextSource.ENTITY
            if decl.realtime and not entity:
                yield locating.at(spec, page, f"{path}.realtime", "realtime needs source: entity")
            if decl.id is not None and not entity:
                yield locating.at(spec, page, f"{path}.id", "id belongs to source: entity")
            if entity:
                if decl.entity is None:
                    yield locating.at(spec, page, path, "source entity needs an entity")
                elif spec.resolve_entity(decl.entity, module) is None:
                    yield from locating.undeclared_entity(
                        spec, page, f"{path}.entity", decl.entity, f"{decl.entity!r} is not a declared entity"
                    )
            if decl.source is ContextSource.EXPR:
                yield from _expression(spec, page, path, decl.expr, seen)
            if decl.source is ContextSource.API:
                yield from _call(spec, page, path, decl.call, module)
            seen.add(decl.name)


def _expression(
    spec: Spec, page: m.PageManifest, path: str, source: str | None, earlier: set[str]
) -> Iterator[Problem]:
    if source is None:
        yield locating.at(spec, page, path, "source expr needs an expr")
        return
    try:
        parsed = expressions.parse(source)
    except expressions.ExpressionError as exc:
        yield locating.at(spec, page, f"{path}.expr", f"invalid expression {source!r}: {exc}")
        return
    for reference in sorted(parsed.references()):
        head = reference.partition(".")[0]
        if head not in ROOTS and head not in earlier:
            yield locating.at(
                spec,
                page,
                f"{path}.expr",
                f"expression {source!r} uses {head!r}, which is not a context declared before it"
                " (nor session or route)",
            )


def _call(
    spec: Spec, page: m.PageManifest, path: str, call: str | None, module: str | None
) -> Iterator[Problem]:
    match = CALL.fullmatch(call or "")
    if match is None:
        yield locating.at(spec, page, f"{path}.call", "source api needs a call: module.service.action")
        return
    key = qualify(f"{match[1]}/{match[2]}", module)
    service = spec.services.get(key)
    if service is None:
        yield from locating.undeclared(
            spec, page, f"{path}.call", "Service", key, f"service {key!r} is not declared"
        )
    elif not any(a.name == match[3] for a in service.spec.actions):
        yield locating.at(spec, page, f"{path}.call", f"service {key!r} has no action {match[3]!r}")
