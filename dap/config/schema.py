"""JSON Schema (draft-07) of every manifest kind, generated from the pydantic models.

One generator feeds both ``dap schema`` (editors, CI of authors) and the loader, which validates
each document against its kind's schema before building models. pydantic emits 2020-12 style
``$defs``; they are moved under draft-07's ``definitions``.

Validation has two speeds. ``fast_validator_for`` compiles a kind's schema into Python code
(fastjsonschema) and checks a valid document in microseconds, which keeps boots and registrations
of large specs quick; it stops at the first error, so only a document that fails is checked again
by ``validator_for`` (jsonschema), which lists every error with its path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import fastjsonschema

from dap.config.manifests import KINDS

if TYPE_CHECKING:  # imported on first use: only a document that fails its schema needs it
    import jsonschema

DRAFT_07 = "http://json-schema.org/draft-07/schema#"


@functools.cache
def manifest_schema() -> dict[str, Any]:
    """The schema of one manifest document of any kind, selected by ``kind``."""
    definitions: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for kind, model in KINDS.items():
        schema = model.model_json_schema(by_alias=True, ref_template="#/definitions/{model}")
        definitions.update(schema.pop("$defs", {}))
        definitions[model.__name__] = schema
        branches.append(
            {
                "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                "then": {"$ref": f"#/definitions/{model.__name__}"},
            }
        )
    return {
        "$schema": DRAFT_07,
        "$id": "https://dap.io/schemas/manifest-v1.json",
        "title": "dap manifest (apiVersion dap.io/v1)",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"kind": {"enum": list(KINDS)}},
        "allOf": branches,
        "definitions": definitions,
    }


def _kind_schema(kind: str) -> dict[str, Any]:
    root = manifest_schema()
    return {
        "$schema": DRAFT_07,
        "$ref": f"#/definitions/{KINDS[kind].__name__}",
        "definitions": root["definitions"],
    }


@functools.cache
def fast_validator_for(kind: str) -> Callable[[Any], Any]:
    """A compiled validator for ``kind``; raises ``fastjsonschema.JsonSchemaException`` on failure."""
    validate: Callable[[Any], Any] = fastjsonschema.compile(_kind_schema(kind))
    return validate


@functools.cache
def validator_for(kind: str) -> jsonschema.Draft7Validator:
    """A compiled validator for documents of ``kind`` (built once per process)."""
    import jsonschema

    return jsonschema.Draft7Validator(_kind_schema(kind))
