"""The read-through cache of find-by-id, for entities that declare ``cache: {ttl: ...}``.

One bounded in-process map from ``(table, tenant, id)`` to the rendered answer (body and ETag).
An entry is served only while it is younger than the entity's TTL (clamped to the spec's limits,
1 s to 1 h) and only to requests reading the same catalog it was rendered with, so a spec swap
never serves a record in an old shape. Writes through this process invalidate their record at
once (whole tables for ``on_delete`` effects on other tables); writes through other processes are
seen when the TTL runs out — that staleness is what an author accepts by declaring the cache.
Keys carry the tenant: one workspace can never be answered from another's entry.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from dap.config import durations

MIN_TTL, MAX_TTL = 1.0, 3600.0
MAX_ENTRIES = 10_000

Key = tuple[str, uuid.UUID, uuid.UUID]  # table, tenant, record id


def ttl_seconds(ttl: str | None) -> float | None:
    """The TTL of a ``CacheSpec``, clamped to the spec's limits; ``None`` when not declared."""
    if ttl is None:
        return None
    return min(MAX_TTL, max(MIN_TTL, durations.parse(ttl).total_seconds()))


@dataclass(frozen=True)
class Entry:
    expires: float
    catalog: Any  # the Catalog the body was rendered from (compared by identity)
    body: str
    etag: str


class FindCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[Key, Entry] = {}
        self._max = max_entries
        # bumped by every invalidation: a read that saw another epoch must not be cached, since it
        # may have fetched the row just before a write committed
        self.epoch = 0

    def get(self, key: Key, catalog: Any) -> Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= time.monotonic() or entry.catalog is not catalog:
            self._entries.pop(key, None)
            return None
        return entry

    def put(self, key: Key, *, epoch: int, ttl: float, catalog: Any, body: str, etag: str) -> None:
        if epoch != self.epoch:
            return
        if len(self._entries) >= self._max:
            now = time.monotonic()
            self._entries = {k: e for k, e in self._entries.items() if e.expires > now}
            if len(self._entries) >= self._max:  # still full of live entries: start over
                self._entries.clear()
        self._entries[key] = Entry(time.monotonic() + ttl, catalog, body, etag)

    def invalidate(self, key: Key) -> None:
        self.epoch += 1
        self._entries.pop(key, None)

    def drop_table(self, table: str) -> None:
        self.epoch += 1
        self._entries = {k: e for k, e in self._entries.items() if k[0] != table}

    def __len__(self) -> int:
        return len(self._entries)
