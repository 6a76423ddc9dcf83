"""The pure parts of events: delivery plans, backoff, event types, templates, the queue warning."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from dap import config
from dap.config.enums import CallMode, EventChannel
from dap.server import errors
from dap.server.events import channels, plans

FILES = {
    "u/module.yaml": "apiVersion: dap.io/v1\nkind: Module\nmetadata: {name: u}\nspec: {title: U}\n",
    "u/thing.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: thing, module: u}
spec:
  fields:
    - {name: title, type: string}
  actions:
    - {name: go, call: async, emits: went}
    - {name: poke, emits: async_poked}
  events:
    - name: went
      publish: {topic: things}
      deliver:
        - {channel: audit_log}
        - {channel: queue, job: go}
        - {channel: pubsub}
        - channel: webhook
          webhook: {url: "http://127.0.0.1:9/x"}
          retry: {max_attempts: 2, backoff: 100ms, max_backoff: 300ms, multiplier: 2}
    - {name: async_poked}
""",
}


@pytest.fixture(scope="module")
def spec() -> config.Spec:
    return config.load_files(FILES)


def test_queue_deliveries_warn_and_have_no_plan(spec: config.Spec) -> None:
    assert any("queue is declared but not delivered" in w.message for w in spec.warnings)
    entity = spec.entities["u/thing"].spec
    found = plans.deliveries(entity, "u/thing", "went")
    assert [d.channel for d in found] == [EventChannel.AUDIT_LOG, EventChannel.PUBSUB, EventChannel.WEBHOOK]
    assert [d.consumer for d in found] == [
        "u/thing:went:0:audit_log",
        "u/thing:went:2:pubsub",
        "u/thing:went:3:webhook",
    ]
    assert found[1].topic == "things"
    only = plans.deliveries(entity, "u/thing", "went", ["u/thing:went:3:webhook"])
    assert [d.consumer for d in only] == ["u/thing:went:3:webhook"]
    assert plans.deliveries(entity, "u/thing", "created") == ()  # an undeclared built-in: none


def test_backoff_grows_by_the_multiplier_up_to_the_cap(spec: config.Spec) -> None:
    retry = plans.deliveries(spec.entities["u/thing"].spec, "u/thing", "went")[2].retry
    assert [plans.backoff(retry, n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]
    assert [plans.exhausted(retry, n) for n in (1, 2, 3)] == [False, False, True]
    assert plans.exhausted(plans.DEFAULT_RETRY, 3) is False and plans.exhausted(plans.DEFAULT_RETRY, 4)


def test_event_types_follow_the_declaration_then_the_name(spec: config.Spec) -> None:
    entity = spec.entities["u/thing"].spec
    assert plans.event_type(entity, "async_poked") is CallMode.ASYNC
    assert plans.event_type(entity, "went") is CallMode.SYNC
    assert plans.event_type(entity, "updated") is CallMode.ASYNC  # undeclared built-in
    with pytest.raises(errors.ValidationFailed) as missing:
        plans.event_type(entity, "nobody_declared_me")
    assert missing.value.code == plans.TYPE_MISSING
    with pytest.raises(errors.ValidationFailed) as mismatch:
        plans.event_type(entity, "went", entity.action("go"))
    assert mismatch.value.code == plans.TYPE_MISMATCH


def test_templates_fill_record_fields_actor_and_event() -> None:
    event = channels.Event(
        1,
        uuid.uuid4(),
        uuid.uuid4(),
        "u/thing",
        uuid.uuid4(),
        "create",
        "created",
        {"record": {"title": "Lamp", "n": None}},
        1,
        "s",
        "alice",
        None,
        dt.datetime.now(dt.UTC),
        0,
        None,
    )
    text = channels.render("{{ title }} ({{record.n}}) {{ event }} by {{actor}}, {{ missing }}.", event)
    assert text == "Lamp () created by alice, ."
    assert event.message()["type"] == "u/thing.created"


BUS_FILES = {
    "bus.yaml": b"""
apiVersion: dap.io/v1
kind: Datastore
metadata: {name: event-bus}
spec: {driver: nats, connection: {host: nats.internal, port: 4333}}
---
apiVersion: dap.io/v1
kind: Datastore
metadata: {name: cache}
spec: {driver: valkey}
""",
    "u/module.yaml": FILES["u/module.yaml"].encode(),
}


def test_pubsub_goes_to_the_override_then_the_declared_nats_datastore_then_notify() -> None:
    from dap.server.events import brokers

    declared = brokers.declared(BUS_FILES)
    assert sorted(declared) == ["cache", "event-bus"]
    assert brokers.broker(declared, {}) == brokers.Broker("nats://nats.internal:4333")
    creds = {
        "DAP_DATASTORE_EVENT_BUS_USERNAME": "dap",
        "DAP_DATASTORE_EVENT_BUS_PASSWORD": "p@ss/word",
        "DAP_DATASTORE_EVENT_BUS_HOST": "10.0.0.7",
    }
    assert brokers.broker(declared, creds) == brokers.Broker("nats://10.0.0.7:4333", "dap", "p@ss/word")
    injected = {**creds, "DAP_DATASTORE_EVENT_BUS_URL": "nats://claim:4222"}
    assert brokers.broker(declared, injected) == brokers.Broker("nats://claim:4222", "dap", "p@ss/word")
    override = {**injected, "DAP_NATS_URL": "nats://dev:1"}
    assert brokers.broker(declared, override) == brokers.Broker("nats://dev:1")
    assert brokers.broker({"cache": declared["cache"]}, {}) is None  # no nats: Postgres NOTIFY
    hostless = brokers.declared(
        {"b.yaml": b"apiVersion: dap.io/v1\nkind: Datastore\nmetadata: {name: b}\nspec: {driver: nats}\n"}
    )
    with pytest.raises(errors.BootRefused, match="DAP_DATASTORE_B_URL"):
        brokers.broker(hostless, {})
    assert brokers.broker(hostless, {"DAP_DATASTORE_B_URL": "nats://x:1"}) == brokers.Broker("nats://x:1")


def test_the_datastore_variable_names_agree_with_the_bridge() -> None:
    from dap.bridge import datastores
    from dap.server.events import brokers

    for name in ("event-bus", "9lives", "a.b_c", "Bus"):
        assert brokers.env_key(name) == datastores.env_key(name)
        env = {f"DAP_DATASTORE_{datastores.env_key(name)}_URL": "nats://u"}
        assert brokers.credentials(name, env) == datastores.credentials(name, env)
