"""Building blocks shared by every manifest record.

``Record`` is the base of all manifest models: immutable, unknown keys refused (a typo must not
be silently dropped), and Python-keyword keys such as ``from`` mapped through aliases. The
annotated types here carry their own JSON Schema, so ``dap schema`` and the runtime models can
never disagree.
"""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, StringConstraints

from dap.config import durations


class Record(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        use_enum_values=False,
        str_strip_whitespace=False,
    )


def _check_duration(value: str) -> str:
    durations.parse(value)
    return value


Duration = Annotated[
    str,
    StringConstraints(pattern=durations.DURATION_PATTERN),
    AfterValidator(_check_duration),
    pydantic.Field(description="duration such as 300s, 30m, 1h30m"),
]

Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", min_length=1, max_length=128)]
FieldName = Identifier
EntityRef = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z][a-z0-9_]*(/[a-z][a-z0-9_]*)?$"),
    pydantic.Field(description="entity reference: module/name, or name within the same module"),
]
DottedEntityRef = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z][a-z0-9_]*[./][a-z][a-z0-9_]*$"),
    pydantic.Field(description="entity reference in module.entity (or module/entity) form"),
]
Expression = Annotated[str, StringConstraints(min_length=1), pydantic.Field(description="expression")]
Scalar = str | int | float | bool
JsonObject = dict[str, Any]
