"""Field declarations: the typed columns of an entity and everything attached to them.

The spec names several records without defining them (RelationDecl, PickerDecl, StorageSpec,
UnitDecl, ValidationRule, NaturalKeyRuleDecl); their shapes are designed here and recorded in
docs/decisions.md. Rules that concern one field alone live as validators on the model; rules that
need the rest of the spec (does the relation target exist?) live in ``validation``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic

from dap.config.base import Duration, EntityRef, Expression, FieldName, Record, Scalar
from dap.config.enums import ChildStorage, FieldClassification, FieldType, NaturalKeyEntry


class FieldOption(Record):
    value: Scalar
    label: str | None = None


class FieldRef(Record):
    entity: EntityRef
    field: FieldName


class ComputedDecl(Record):
    formula: Expression


class AutoFillDecl(Record):
    from_: FieldName = pydantic.Field(alias="from")
    field: FieldName


class RelationDecl(Record):
    """Designed: the target entity, the field shown for a related record, and what a delete does."""

    entity: EntityRef
    display_field: FieldName | None = None
    on_delete: Literal["restrict", "cascade", "set_null"] = "restrict"


class PickerDecl(Record):
    """Designed: fill child rows by choosing records of ``entity``; ``map`` copies source → child fields."""

    entity: EntityRef
    map: dict[FieldName, FieldName] = pydantic.Field(default_factory=dict)
    multiple: bool = True
    filters: tuple[FieldRef, ...] = ()


class StorageSpec(Record):
    """Designed: where a file field's bytes live."""

    datastore: str | None = None
    prefix: str | None = None
    max_bytes: int | None = pydantic.Field(default=None, gt=0)
    accept: tuple[str, ...] = ()


class UnitDecl(Record):
    """Designed: a unit of measure, fixed (``symbol``) or read from a sibling field (``field``)."""

    symbol: str | None = None
    dimension: str | None = None
    field: FieldName | None = None


class ValidationRule(Record):
    """Designed: one declarative check; ``expression`` rules use the manifest expression language."""

    rule: Literal["min", "max", "min_length", "max_length", "pattern", "expression"]
    value: Any = None
    message: str | None = None


# The tokens of a natural-key pattern: date parts of the creation date and one counter whose width
# is the number of ``#`` (the server renders them, dap.server.storage.numbering).
NATURAL_KEY_TOKEN = re.compile(r"\{(YYYY|YY|MM|DD|#+)\}")


class NaturalKeyRuleDecl(Record):
    """Designed: a naming pattern such as ``PO-{YYYY}-{#####}``; counters are per tenant."""

    pattern: str = pydantic.Field(min_length=1)
    reset: Literal["never", "yearly", "monthly"] = "never"

    @pydantic.field_validator("pattern")
    @classmethod
    def _one_counter(cls, pattern: str) -> str:
        counters = [m for m in NATURAL_KEY_TOKEN.findall(pattern) if m.startswith("#")]
        if len(counters) != 1:
            raise ValueError(
                "a natural key pattern needs exactly one counter such as {#####} "
                "(the number of # is the zero-padded width)"
            )
        unknown = re.findall(r"\{[^}]*\}", NATURAL_KEY_TOKEN.sub("", pattern))
        if unknown:
            tokens = ", ".join(unknown)
            raise ValueError(f"unknown token(s) {tokens}; use {{YYYY}} {{YY}} {{MM}} {{DD}} {{#...}}")
        return pattern


class ChildDecl(Record):
    storage: ChildStorage
    entity: EntityRef | None = None
    fields: tuple[Field, ...] = ()
    sequence_field: FieldName | None = None
    picker: PickerDecl | None = None


class Field(Record):
    name: FieldName
    type: FieldType
    title: str | None = None
    description: str | None = None
    required: bool = False
    required_when: Expression | None = None
    visible_when: Expression | None = None
    readonly_when: Expression | None = None
    read_only: bool = False
    immutable: bool = False
    index: bool = False
    unique: bool = False
    default: Any = None
    enum_values: tuple[str, ...] = ()
    options: tuple[FieldOption, ...] = ()
    multiple: bool | None = None
    precision: int | None = pydantic.Field(default=None, ge=1, le=1000)
    scale: int | None = pydantic.Field(default=None, ge=0, le=1000)
    decimal_places: int | None = pydantic.Field(default=None, ge=0, le=1000)
    currency: str | None = pydantic.Field(default=None, pattern=r"^[A-Z]{3}$")
    computed: ComputedDecl | None = None
    auto_fill: AutoFillDecl | None = None
    child: ChildDecl | None = None
    relation: RelationDecl | None = None
    rules: tuple[ValidationRule, ...] = ()
    storage: StorageSpec | None = None
    unit: UnitDecl | None = None
    tree: bool = False
    natural_key: bool = False
    natural_key_entry: NaturalKeyEntry | None = None
    natural_key_rule: NaturalKeyRuleDecl | None = None
    classification: FieldClassification | None = None
    encrypted: bool = False
    masked: bool = False
    audited: bool = False
    exclude: tuple[str, ...] = ()
    required_permission: str | None = None
    renamed_from: FieldName | None = None
    removed: bool = False
    accept_data_loss: bool = False
    reason: str | None = None

    @property
    def caption(self) -> str:
        """The title, or the humanised name (``unit_price`` → ``Unit price``)."""
        return self.title or humanise(self.name)

    @property
    def scale_digits(self) -> int | None:
        """Digits after the decimal point for decimal and money fields."""
        return self.scale if self.scale is not None else self.decimal_places


class ExtendStorage(Record):
    target: EntityRef
    namespace: FieldName
    validate_: str | None = pydantic.Field(default=None, alias="validate")


class CacheSpec(Record):
    ttl: Duration


def humanise(name: str) -> str:
    words = name.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


ChildDecl.model_rebuild()
