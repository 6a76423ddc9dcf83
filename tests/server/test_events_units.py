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
