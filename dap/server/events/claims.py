"""The outbox path's statements (``dispatcher``): the claim, settlements, retries, feed positions.

Apart from ``dispatcher`` so that module stays one job (the loop and the delivery); the names are
imported there too, where the tests read them (``dispatcher.CLAIM``, ``dispatcher.DUE``).
"""

from __future__ import annotations

# $2: the tenants this process delivers for (NULL: all). Processes serving different workspaces
# may share one database (resource pods of one namespace): one must never settle another's
# events with its own catalog, which lacks their declarations (it would mark them delivered).
#
# The payload comes as text, decoded only for an event that has deliveries: most built-in events
# (created, updated) of most entities have none, and decoding every claimed payload was the
# largest part of the dispatcher's Python per event (docs/performance.md, "The dispatcher's cost
# per write").
CLAIM = """
SELECT o.id, o.public_id, o.tenant_id, o.entity, o.record_id, o.action, o.event,
  o.payload::text AS payload, o.version, o.actor_sub, o.actor_username, o.request_id,
  o.created_at, o.attempts, o.consumers, o.traceparent
FROM dap.outbox o
WHERE o.delivered_at IS NULL AND o.next_at <= now()
  AND ($2::uuid[] IS NULL OR o.tenant_id = ANY($2::uuid[]))
  AND NOT EXISTS (
    SELECT 1 FROM dap.outbox p
    WHERE p.delivered_at IS NULL AND p.tenant_id = o.tenant_id AND p.record_id = o.record_id AND p.id < o.id
  )
ORDER BY o.id
LIMIT $1
FOR UPDATE OF o SKIP LOCKED
"""
SETTLED = "SELECT event_id, consumer FROM dap.event_deliveries WHERE event_id = ANY($1::uuid[])"
SETTLE = (
    "INSERT INTO dap.event_deliveries (consumer, event_id, outcome) "
    "SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[]) ON CONFLICT DO NOTHING"
)
DEAD = (
    "INSERT INTO dap.dead_letter (outbox_id, event_id, tenant_id, entity, event, consumer, channel, "
    "attempts, last_error, settled_as) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
)
RETRY = (
    "UPDATE dap.outbox SET attempts = attempts + 1, last_error = $2, "
    "next_at = now() + make_interval(secs => $3) WHERE id = $1"
)
# settled rows get their feed positions, and the feed's NOTIFY the highest: one statement; it
# also says whether other rows are due (``more``), so that a batch that left none is not followed
# by an empty claim (three round trips: BEGIN, the claim, COMMIT) before the dispatcher waits;
# ``clock_timestamp()``, not ``now()``: a row committed since this transaction began is due
DONE = (
    "WITH d AS (UPDATE dap.outbox SET delivered_at = now(), seq = nextval('dap.outbox_feed_seq') "
    "WHERE id = ANY($1::bigint[]) RETURNING seq) SELECT pg_notify($2, max(seq)::text), "
    "EXISTS (SELECT 1 FROM dap.outbox o WHERE o.delivered_at IS NULL AND o.next_at <= clock_timestamp() "
    "AND o.id <> ALL($1::bigint[]) AND ($3::uuid[] IS NULL OR o.tenant_id = ANY($3::uuid[]))) AS more "
    "FROM d"
)
# seconds to the next retry, NULL when no row waits for one (``greatest`` would make that 0, and
# an idle dispatcher would poll at its 50 ms floor instead of every ``poll``); past ones are <= 0
DUE = (
    "SELECT extract(epoch FROM min(next_at) - now())::float8 FROM dap.outbox "
    "WHERE delivered_at IS NULL AND attempts > 0 AND ($1::uuid[] IS NULL OR tenant_id = ANY($1::uuid[]))"
)
# the dead index entries are what the claim walks: clean the indexes even when few heap pages have
# dead rows (AUTO skips them under 2% of the table's pages, the usual case with an hour of rows kept)
VACUUM = "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) dap.outbox"
PRUNE = (
    "DELETE FROM dap.outbox WHERE id IN (SELECT id FROM dap.outbox WHERE delivered_at IS NOT NULL "
    "AND delivered_at < now() - make_interval(secs => $1) AND NOT EXISTS (SELECT 1 FROM dap.dead_letter d "
    "WHERE d.outbox_id = dap.outbox.id AND d.replayed_at IS NULL) ORDER BY id LIMIT 5000)"
)
