"""A strict YAML reader for manifests.

PyYAML follows YAML 1.1, where ``yes``/``no``/``on``/``off`` are booleans and ``2024-01-01`` is a
date object; in a manifest those surprise authors (``enum_values: [yes, no]``). This reader keeps
YAML 1.2's core rules instead: only ``true``/``false`` are booleans, timestamps stay strings, and
a mapping that repeats a key is an error rather than "last one wins".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class StrictLoader(_Base):  # type: ignore[misc]
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            # Scalar keys compare by their text; constructing them here would do the work twice.
            is_scalar = isinstance(key_node, yaml.ScalarNode)
            key = key_node.value if is_scalar else self.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKeyError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}; each key may appear once",
                    key_node.start_mark,
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# Resolvers are a class-level dict shared with SafeLoader: copy before changing.
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _Base.yaml_implicit_resolvers.items()
}
for _first in list(StrictLoader.yaml_implicit_resolvers):
    StrictLoader.yaml_implicit_resolvers[_first] = [
        (tag, regexp)
        for tag, regexp in StrictLoader.yaml_implicit_resolvers[_first]
        if tag != "tag:yaml.org,2002:bool"
    ]
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)\Z"), list("tTfF")
)


def load_all(text: str) -> Iterator[Any]:
    """Yield each document of a YAML stream, strictly."""
    yield from yaml.load_all(text, Loader=StrictLoader)
