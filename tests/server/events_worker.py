"""A dispatcher in its own process, for the kill -9 tests: ``python -m tests.server.events_worker DSN``.

Its ``reliable_event`` runner records the effect in ``kill_effects`` (no unique constraint: a
duplicated effect would show as a second row) on the dispatcher's connection, in its transaction.
"""

from __future__ import annotations

import asyncio
import sys

from dap import config
from dap.config.events import DeliveryTarget
from dap.server.events import channels, dispatcher, measures
from dap.server.storage import db

FILES = {
    "kx/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: kx}\nspec: {title: Kill}\n",
    "kx/item.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: item, module: kx}
spec:
  fields:
    - {name: title, type: string}
  actions:
    - {name: poke}
  events:
    - name: ping
      deliver:
        - {channel: reliable_event, target: {resource: kx.item, action: poke}}
""",
}
EFFECTS = """
CREATE TABLE IF NOT EXISTS kill_effects (
    n bigserial PRIMARY KEY, event_id uuid NOT NULL, record_id uuid, outbox_id bigint NOT NULL, pid int,
    i int
)
"""


async def effect(conn: db.Connection, event: channels.Event, _target: DeliveryTarget) -> None:
    await conn.execute(
        "INSERT INTO kill_effects (event_id, record_id, outbox_id, pid, i) "
        "VALUES ($1, $2, $3, pg_backend_pid(), $4)",
        event.public_id,
        event.record_id,
        event.id,
        event.payload.get("i"),
    )


async def main(dsn: str) -> None:
    spec = config.load_files(FILES)
    specs = {e.key: e.spec for e in spec.entities.values()}
    pool = await db.open_pool(dsn, 4)
    work = dispatcher.Dispatcher(
        pool,
        dsn,
        lambda: specs,
        channels.Channels(runner=effect),
        measures.Counters(),
        dispatcher.Settings(batch=100, poll=0.2),
    )
    work.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
