"""The index guard: a list no index serves, run on a big tenant, is logged once and counted.

Derived indexes (``indexing``) serve the lists the manifests declare; a client may still ask for
any filter and sort the REST API allows. Such a list is cheap on a small tenant and reads (and
sorts) every row of a big one. After each list the server asks :meth:`Guard.check`:

1. does an index of the table serve it? (pure, remembered per query shape): one that, after
   ``tenant_id`` and the query's equalities, either gives the sort's first key or narrows the rows
   by one more condition. A list only ``tenant_id`` narrows, sorted by something no index orders, is
   *unserved*;
2. if unserved, how many rows has the tenant? The planner's estimate for ``tenant_id = $1``
   (its statistics, no scan), remembered a minute per tenant;
3. at or above :data:`THRESHOLD` rows: counted (``dap_list_unindexed_total{table}``), and the first
   time for that table and shape logged as a warning with the plan's summary (node types, indexes,
   estimated rows), so that someone can declare the list or ``index: true``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from dap.config.enums import FilterOp
from dap.server.storage import db
from dap.server.storage.queries import ListQuery
from dap.server.storage.tables import Index, Table, quote

log = logging.getLogger(__name__)

THRESHOLD = int(os.environ.get("DAP_INDEX_GUARD_ROWS", "10000"))  # tenant rows that make it matter
SIZE_SECONDS = 60.0  # how long a tenant's row estimate is trusted
_EQUAL = frozenset({FilterOp.EQ, FilterOp.NULL})
_NARROW = frozenset({FilterOp.GT, FilterOp.GTE, FilterOp.LT, FilterOp.LTE, FilterOp.BETWEEN, FilterOp.IN})

Shape = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, bool], ...]]


def shape_of(query: ListQuery) -> Shape:
    """The query without its values: conditions (column, op) and sort keys."""
    conds = tuple(sorted({(c.column, _kind(c.op, len(c.values))) for c in query.conditions}))
    return conds, tuple((k.column, k.descending) for k in query.sort)


def _kind(op: FilterOp, count: int) -> str:
    if op in _EQUAL or (op is FilterOp.IN and count == 1):  # sql writes a one-value IN as =
        return "eq"
    return "narrow" if op in _NARROW else "other"


def _serves(index: Index, shape: Shape) -> bool:
    if index.where is not None or not index.columns or index.columns[0] != "tenant_id":
        return False
    conds, sort = shape
    equal = {c for c, kind in conds if kind == "eq"}
    narrow = {c for c, kind in conds if kind == "narrow"}
    columns = list(index.columns[1:])
    descending = list(index.descending[1:]) if index.descending else [False] * len(columns)
    used = 0
    while columns and columns[0] in equal:
        columns.pop(0)
        descending.pop(0)
        used += 1
    wanted = [(c, d) for c, d in sort if c not in equal]
    # the index gives the order's first key: Postgres reads it in order (an incremental sort breaks
    # the ties, if any: a LIMIT reads only the first groups)
    if wanted and columns and columns[0] == wanted[0][0]:
        return True
    return used > 0 or bool(columns and columns[0] in narrow)


def served(table: Table, shape: Shape) -> bool:
    """Whether an index of ``table`` (its primary key included) serves a list of ``shape``."""
    primary = Index("primary key", table.primary_key, unique=True)
    return any(_serves(i, shape) for i in (primary, *table.indexes))


class Guard:
    """The guard of one process: what it logged, what it counted, what it knows of tenants."""

    def __init__(self, threshold: int = THRESHOLD) -> None:
        self.threshold = threshold
        self.counts: dict[str, int] = {}
        self._served: dict[tuple[int, Shape], bool] = {}
        self._logged: set[tuple[str, Shape]] = set()
        self._sizes: dict[tuple[str, uuid.UUID], tuple[float, float]] = {}

    async def check(
        self,
        conn: db.Connection,
        table: Table,
        query: ListQuery,
        tenant: uuid.UUID,
        statement: tuple[str, list[Any]],
    ) -> bool:
        """Count (and log once) ``statement`` when no index serves it on a big tenant; answer
        whether it was counted. Never fails the list: a failure here is logged at debug."""
        shape = shape_of(query)
        key = (id(table), shape)
        ok = self._served.get(key)
        if ok is None:
            ok = self._served[key] = served(table, shape)
        if ok:
            return False
        try:
            rows = await self._size(conn, table, tenant)
            if rows < self.threshold:
                return False
            self.counts[table.name] = self.counts.get(table.name, 0) + 1
            if (table.name, shape) not in self._logged:
                self._logged.add((table.name, shape))
                plan = await _explain(conn, statement[0], *statement[1])
                log.warning(
                    "a list no index serves ran on a big tenant; declare it (a Table's filters and sort) "
                    "or index: true on its fields",
                    extra={
                        "ctx": {
                            "table": table.name,
                            "conditions": [f"{c} {k}" for c, k in shape[0]],
                            "sort": [f"-{c}" if d else c for c, d in shape[1]],
                            "tenant_rows": int(rows),
                            "plan": summary(plan),
                        }
                    },
                )
            return True
        except Exception as exc:  # the guard must never fail a list
            log.debug("index guard skipped", extra={"ctx": {"error": f"{exc.__class__.__name__}: {exc}"}})
            return False

    async def _size(self, conn: db.Connection, table: Table, tenant: uuid.UUID) -> float:
        key = (table.name, tenant)
        found = self._sizes.get(key)
        now = time.monotonic()
        if found is not None and now - found[1] < SIZE_SECONDS:
            return found[0]
        plan = await _explain(conn, f"SELECT 1 FROM {quote(table.name)} WHERE tenant_id = $1", tenant)
        rows = float(plan.get("Plan Rows", 0))
        self._sizes[key] = (rows, now)
        return rows


async def _explain(conn: db.Connection, statement: str, *args: Any) -> dict[str, Any]:
    raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args)
    found = json.loads(raw) if isinstance(raw, str) else raw
    return found[0]["Plan"]  # type: ignore[no-any-return]


def summary(plan: dict[str, Any]) -> str:
    """``Limit > Sort > Seq Scan on t (rows≈20000)``: the plan's nodes, outermost first."""
    parts = []
    node: dict[str, Any] | None = plan
    while node is not None:
        text = node["Node Type"]
        if "Index Name" in node:
            text += f" using {node['Index Name']}"
        if "Relation Name" in node:
            text += f" on {node['Relation Name']} (rows≈{int(node.get('Plan Rows', 0))})"
        parts.append(text)
        children = node.get("Plans") or []
        node = children[0] if children else None
    return " > ".join(parts)


GUARD = Guard()  # the process's guard (``workflows.operations`` checks each list with it)


class GuardCollector(Collector):
    """``dap_list_unindexed_total{table}``: lists no index served, on tenants above the threshold."""

    def __init__(self, guard: Guard = GUARD) -> None:
        self._guard = guard

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "dap_list_unindexed",
            f"lists no index serves, run on a tenant of {self._guard.threshold} rows or more",
            labels=["table"],
        )
        for table, count in sorted(self._guard.counts.items()):
            family.add_metric([table], count)
        yield family
