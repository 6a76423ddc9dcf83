"""The same cases over REST and gRPC give the same outcomes: one operation per verb, two adapters.

Each case runs once per protocol on records of its own (a tag per run) and the two outcomes --
``"ok"`` with the values that matter, or the ``SVC.*`` code -- must be equal; each case also pins
the outcome it expects, so that two equally wrong adapters do not pass. What gRPC alone has
(reflection, services per ``expose``, ``dap schema --proto``) is in ``test_protocol_surfaces``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .protocols_harness import (
    ADMIN,
    BOB,
    CLERK,
    MANAGER,
    NOBODY,
    Both,
    Client,
    both,
    created,
    finished_job,
    job_id,
    registered,
)
from .protocols_spec import Outcome, bearer

pytestmark = pytest.mark.asyncio(loop_scope="module")

__all__ = ["both", "registered"]  # fixtures, used by name

Case = Callable[[Client, str], Awaitable[Any]]


def pick(outcome: Outcome, *keys: str) -> Outcome:
    """The code and the named values as text (gRPC's JSON writes int64 as strings)."""
    code, data = outcome
    if code != "ok" or data is None:
        return code, None
    if isinstance(data, list):
        return code, sorted(tuple(str(row.get(k)) for k in keys) for row in data)
    return code, {k: str(data.get(k)) for k in keys}


# --- the cases: each returns a comparable outcome ----------------------------------------


async def create_and_read_back(c: Client, tag: str) -> Any:
    body = {"name": f"{tag}-acme", "credit": "12.50", "visits": 3, "vip": True, "tags": ["a", "b"]}
    row = await created(c, "customer", body)
    return pick(
        await c.find("customer", row["id"], ADMIN), "name", "credit", "visits", "vip", "tags", "version"
    )


async def validation_missing_required(c: Client, tag: str) -> Any:
    return await c.create("customer", {"visits": 1}, ADMIN)


async def validation_wrong_type(c: Client, tag: str) -> Any:
    return await c.create("customer", {"name": f"{tag}", "credit": "lots"}, ADMIN)


async def permission_refused(c: Client, tag: str) -> Any:
    return await c.create("order", {"number": f"{tag}-1"}, NOBODY)


async def no_token(c: Client, tag: str) -> Any:
    return await c.find("order", str(uuid.uuid4()), None)


async def unknown_record(c: Client, tag: str) -> Any:
    return await c.find("customer", str(uuid.uuid4()), ADMIN)


async def malformed_id(c: Client, tag: str) -> Any:
    return await c.find("customer", "not-an-id", ADMIN)


async def field_permission_hides(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-c", "credit": "5.00"})
    clerk = pick(await c.find("customer", row["id"], CLERK), "name", "credit")
    manager = pick(await c.find("customer", row["id"], MANAGER), "name", "credit")
    return clerk, manager


async def row_scope_find(c: Client, tag: str) -> Any:
    bobs = await created(c, "order", {"number": f"{tag}-b", "buyer": "bob"})
    return await c.find("order", bobs["id"], CLERK), pick(await c.find("order", bobs["id"], BOB), "number")


async def row_scope_list(c: Client, tag: str) -> Any:
    await created(c, "order", {"number": f"{tag}-c", "buyer": "carl"})
    await created(c, "order", {"number": f"{tag}-b", "buyer": "bob"})
    return pick(await c.list("order", f"number[like]={tag}%25", CLERK), "number")


async def list_pages(c: Client, tag: str) -> Any:
    for i in range(5):
        await created(c, "customer", {"name": f"{tag}-{i}"})
    return pick(await c.list("customer", f"name[like]={tag}%25&limit=2&sort=name", ADMIN), "name")


async def update_and_stale_version(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-u"})
    first = pick(await c.update("customer", row["id"], {"visits": 7}, ADMIN, version=1), "visits", "version")
    stale = await c.update("customer", row["id"], {"visits": 8}, ADMIN, version=1)
    return first, stale


async def update_unknown_field(c: Client, tag: str) -> Any:
    """A field the entity lacks (gRPC: a path of ``update_mask``) is refused as REST refuses it."""
    row = await created(c, "customer", {"name": f"{tag}-m"})
    return await c.update("customer", row["id"], {"visits": 2, "colour": "red"}, ADMIN)


async def update_unknown_field_unpermitted(c: Client, tag: str) -> Any:
    """Without the update permission the answer is the 403, whatever else the update names."""
    row = await created(c, "order", {"number": f"{tag}-p", "buyer": "carl"})
    return await c.update("order", row["id"], {"amount": "1.00", "colour": "red"}, CLERK)


async def lifecycle_submitted_is_final(c: Client, tag: str) -> Any:
    row = await created(c, "order", {"number": f"{tag}-s", "buyer": "meg"}, MANAGER, submit=True)
    update = await c.update("order", row["id"], {"amount": "3.00"}, MANAGER)
    delete = await c.delete("order", row["id"], MANAGER)
    return pick(("ok", row), "docstatus"), update, delete


async def submit_needs_its_permission(c: Client, tag: str) -> Any:
    return await c.create("order", {"number": f"{tag}-x", "buyer": "carl"}, CLERK, submit=True)


async def delete_draft(c: Client, tag: str) -> Any:
    row = await created(c, "order", {"number": f"{tag}-d", "buyer": "meg"}, MANAGER)
    return (await c.delete("order", row["id"], MANAGER))[0], (await c.find("order", row["id"], MANAGER))[0]


async def idempotency_replays(c: Client, tag: str) -> Any:
    key = f"{c.name}-{tag}"  # noqa: RUF100
    first = await c.create("customer", {"name": f"{tag}-i"}, ADMIN, key=key)
    again = await c.create("customer", {"name": f"{tag}-i"}, ADMIN, key=key)
    other = await c.create("customer", {"name": f"{tag}-other"}, ADMIN, key=key)
    same = first[1]["id"] == again[1]["id"] if first[0] == again[0] == "ok" else None
    return pick(first, "name"), pick(again, "name"), same, other[0]


async def lifecycle_moves_as_actions(c: Client, tag: str) -> Any:
    row = await created(c, "order", {"number": f"{tag}-m", "buyer": "carl"}, MANAGER)
    refused = await c.act("order", row["id"], "submit", CLERK)  # submit needs sales.order.submit
    submitted = pick(await c.act("order", row["id"], "submit", MANAGER), "docstatus", "version")
    again = await c.act("order", row["id"], "submit", MANAGER)
    cancelled = pick(await c.act("order", row["id"], "cancel", MANAGER), "docstatus")
    return refused[0], submitted, again[0], cancelled


# --- actions: custom, job (``call: async``) and service actions ------------------------------


def acted(outcome: Outcome, *keys: str) -> Outcome:
    """An action's outcome: the named ``result`` values (the echo handler's params and caller) and
    ``name`` of the record, or the job's ``state``/``action``/``target`` when one was queued."""
    code, data = outcome
    if code != "ok" or data is None:
        return code, None
    if "job" in data:
        job = data["job"]
        return code, {"job": {k: str(job.get(k)) for k in ("state", "action", "target")}}
    result = data.get("result") or {}
    seen = {k: str((result.get("params") or {}).get(k)) for k in keys}
    seen["user"] = str(result.get("user"))
    if data.get("data") is not None:
        seen["name"] = str(data["data"].get("name"))
    return code, seen


async def custom_action_runs(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-a"})
    return acted(
        await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag, "times": 2}),
        "text",
        "times",
    )


async def custom_action_permission(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-p"})
    return await c.action("customer", row["id"], "bump", CLERK, params={"text": tag})


async def custom_action_validation(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-v"})
    missing = await c.action("customer", row["id"], "bump", MANAGER, params={"times": 1})
    wrong = await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag, "times": "many"})
    unknown = await c.action("customer", str(uuid.uuid4()), "bump", MANAGER, params={"text": tag})
    return missing, wrong, unknown


async def custom_action_idempotency(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-k"})
    key = f"{c.name}-{tag}"
    first = await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag}, key=key)
    again = await c.action("customer", row["id"], "bump", MANAGER, params={"text": tag}, key=key)
    other = await c.action("customer", row["id"], "bump", MANAGER, params={"text": "other"}, key=key)
    return acted(first, "text"), first == again, other[0]


async def job_action_runs(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-j"})
    queued = await c.action("customer", row["id"], "recount", MANAGER, params={"text": tag})
    code, job = await finished_job(c, "customer", job_id(queued), MANAGER)
    result = (job or {}).get("result") or {}
    done = (
        code,
        job["state"],
        result.get("result", {}).get("params", {}).get("text"),
        job["record_id"] == row["id"],
    )
    return acted(queued)[0], acted(queued)[1]["job"]["action"], done


async def job_action_refusals(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-r"})
    forbidden = await c.action("customer", row["id"], "recount", CLERK, params={"text": tag})
    invalid = await c.action("customer", row["id"], "recount", MANAGER, params={})
    missing = await c.action("customer", str(uuid.uuid4()), "recount", MANAGER, params={"text": tag})
    return forbidden, invalid, missing


async def job_idempotency_and_owner(c: Client, tag: str) -> Any:
    row = await created(c, "customer", {"name": f"{tag}-o"})
    key = f"{c.name}-{tag}"
    first = await c.action("customer", row["id"], "recount", MANAGER, params={"text": tag}, key=key)
    again = await c.action("customer", row["id"], "recount", MANAGER, params={"text": tag}, key=key)
    other = await c.action("customer", row["id"], "recount", MANAGER, params={"text": "x"}, key=key)
    job = job_id(first)
    same = job == job_id(again)
    await finished_job(c, "customer", job, MANAGER)
    return same, other[0], (await c.job("customer", job, BOB))[0], (await c.job("tools", job, MANAGER))[0]


async def service_action_runs(c: Client, tag: str) -> Any:
    return acted(await c.service("quote", MANAGER, params={"text": tag, "times": 3}), "text", "times")


async def service_action_refusals(c: Client, tag: str) -> Any:
    forbidden = await c.service("quote", CLERK, params={"text": tag})
    anonymous = await c.service("quote", None, params={"text": tag})
    invalid = await c.service("quote", MANAGER, params={"times": "x"})
    return forbidden, anonymous[0].startswith("SVC.AUTH."), invalid


async def service_idempotency(c: Client, tag: str) -> Any:
    key = f"{c.name}-{tag}"
    first = await c.service("quote", MANAGER, params={"text": tag}, key=key)
    again = await c.service("quote", MANAGER, params={"text": tag}, key=key)
    other = await c.service("quote", MANAGER, params={"text": "other"}, key=key)
    return acted(first, "text"), first == again, other[0]


async def service_job_runs(c: Client, tag: str) -> Any:
    key = f"{c.name}-{tag}"
    queued = await c.service("batch", CLERK, params={"text": tag}, key=key)
    again = await c.service("batch", CLERK, params={"text": tag}, key=key)
    code, job = await finished_job(c, "tools", job_id(queued), CLERK)
    result = (job or {}).get("result") or {}
    return (
        acted(queued),
        job_id(queued) == job_id(again),
        (code, job["state"], result.get("result", {}).get("params", {}).get("text"), job.get("record_id")),
        (await c.job("tools", job_id(queued), MANAGER))[0],
    )


async def service_job_callback_refused(c: Client, tag: str) -> Any:
    """A callback URL (the action's ``callback.header``) is checked before a job exists: loopback
    is refused without ``--callback-allow``."""
    return await c.service("batch", CLERK, params={"text": tag}, callback="http://127.0.0.1:9/hook")


async def service_rate_limit(c: Client, tag: str) -> Any:
    caller = bearer(f"{tag}-limited")  # a budget of its own per run
    return [(await c.service("limited", caller))[0] for _ in range(3)]


CASES: dict[str, tuple[Case, Any]] = {
    # name: (case, the outcome both protocols must give; ... where the value is checked otherwise)
    "create_and_read_back": (
        create_and_read_back,
        (
            "ok",
            {
                "name": ...,
                "credit": "12.50",
                "visits": "3",
                "vip": "True",
                "tags": "['a', 'b']",
                "version": "1",
            },
        ),
    ),
    "validation_missing_required": (validation_missing_required, ("SVC.VALIDATE.INVALID", None)),
    "validation_wrong_type": (validation_wrong_type, ...),
    "permission_refused": (permission_refused, ...),
    "no_token": (no_token, ...),
    "unknown_record": (unknown_record, ("SVC.RECORD.NOT_FOUND", None)),
    "malformed_id": (malformed_id, ("SVC.RECORD.NOT_FOUND", None)),
    "field_permission_hides": (field_permission_hides, ...),
    "row_scope_find": (row_scope_find, ...),
    "row_scope_list": (row_scope_list, ...),
    "list_pages": (list_pages, ...),
    "update_and_stale_version": (update_and_stale_version, ...),
    "update_unknown_field": (update_unknown_field, ("SVC.VALIDATE.INVALID", None)),
    "update_unknown_field_unpermitted": (update_unknown_field_unpermitted, ("SVC.AUTH.FORBIDDEN", None)),
    "lifecycle_submitted_is_final": (lifecycle_submitted_is_final, ...),
    "submit_needs_its_permission": (submit_needs_its_permission, ...),
    "delete_draft": (delete_draft, ("ok", "SVC.RECORD.NOT_FOUND")),
    "idempotency_replays": (idempotency_replays, ...),
    "lifecycle_moves_as_actions": (
        lifecycle_moves_as_actions,
        (
            "SVC.AUTH.FORBIDDEN",
            ("ok", {"docstatus": "submitted", "version": "2"}),
            "SVC.DOC.ALREADY_SUBMITTED",
            ("ok", {"docstatus": "cancelled"}),
        ),
    ),
    "custom_action_runs": (
        custom_action_runs,
        ("ok", {"text": "TAG", "times": "2", "user": "meg", "name": "TAG-a"}),
    ),
    "custom_action_permission": (custom_action_permission, ("SVC.AUTH.FORBIDDEN", None)),
    "custom_action_validation": (
        custom_action_validation,
        (
            ("SVC.ACTION.PARAMS_INVALID", None),
            ("SVC.ACTION.PARAMS_INVALID", None),
            ("SVC.RECORD.NOT_FOUND", None),
        ),
    ),
    "custom_action_idempotency": (
        custom_action_idempotency,
        (("ok", {"text": "TAG", "user": "meg", "name": "TAG-k"}), True, "SVC.IDEMPOTENCY.KEY_REUSED"),
    ),
    "job_action_runs": (
        job_action_runs,
        ("ok", "recount", ("ok", "succeeded", "TAG", True)),
    ),
    "job_action_refusals": (
        job_action_refusals,
        (("SVC.AUTH.FORBIDDEN", None), ("SVC.ACTION.PARAMS_INVALID", None), ("SVC.RECORD.NOT_FOUND", None)),
    ),
    "job_idempotency_and_owner": (
        job_idempotency_and_owner,
        (True, "SVC.IDEMPOTENCY.KEY_REUSED", "SVC.JOB.NOT_FOUND", "SVC.JOB.NOT_FOUND"),
    ),
    "service_action_runs": (service_action_runs, ("ok", {"text": "TAG", "times": "3", "user": "meg"})),
    "service_action_refusals": (
        service_action_refusals,
        (("SVC.AUTH.FORBIDDEN", None), True, ("SVC.ACTION.PARAMS_INVALID", None)),
    ),
    "service_idempotency": (
        service_idempotency,
        (("ok", {"text": "TAG", "user": "meg"}), True, "SVC.IDEMPOTENCY.KEY_REUSED"),
    ),
    "service_job_callback_refused": (service_job_callback_refused, ("SVC.JOB.CALLBACK_REFUSED", None)),
    "service_rate_limit": (service_rate_limit, ["ok", "ok", "SVC.RATE.LIMITED"]),
    "service_job_runs": (
        service_job_runs,
        (
            ("ok", {"job": {"state": "queued", "action": "batch", "target": "sales/tools"}}),
            True,
            ("ok", "succeeded", "TAG", None),
            "SVC.JOB.NOT_FOUND",
        ),
    ),
}


def _matches(outcome: Any, expected: Any) -> bool:
    if expected is ...:
        return True
    if isinstance(expected, dict):
        return isinstance(outcome, dict) and all(v is ... or outcome.get(k) == v for k, v in expected.items())
    if isinstance(expected, tuple):
        return (
            isinstance(outcome, tuple)
            and len(outcome) == len(expected)
            and all(_matches(o, e) for o, e in zip(outcome, expected, strict=True))
        )
    return bool(outcome == expected)


def _strip_tag(value: Any, tags: tuple[str, str]) -> Any:
    """The outcome with each run's tag replaced, so that the two runs compare."""
    if isinstance(value, str):
        for t in tags:
            value = value.replace(t, "TAG")
        return value
    if isinstance(value, tuple | list):
        return type(value)(_strip_tag(v, tags) for v in value)
    if isinstance(value, dict):
        return {k: _strip_tag(v, tags) for k, v in value.items()}
    return value


@pytest.mark.parametrize("name", sorted(CASES))
async def test_rest_grpc_and_ws_give_the_same_outcome(both: Both, name: str) -> None:
    case, expected = CASES[name]
    tags = (uuid.uuid4().hex[:8], uuid.uuid4().hex[:8], uuid.uuid4().hex[:8])
    rest = _strip_tag(await case(both.rest, tags[0]), tags)
    rpc = _strip_tag(await case(both.rpc, tags[1]), tags)
    ws = _strip_tag(await case(both.ws, tags[2]), tags)
    assert rest == rpc, f"REST {rest!r} != gRPC {rpc!r}"
    assert rest == ws, f"REST {rest!r} != ws {ws!r}"
    assert _matches(rest, expected), rest


async def test_the_cases_pin_what_matters(both: Both) -> None:
    """The ``...`` expectations above, spelled out once over gRPC."""
    tag = uuid.uuid4().hex[:8]
    c = both.rpc
    assert (await permission_refused(c, tag))[0].startswith("SVC.")
    assert (await no_token(c, tag))[0].startswith("SVC.AUTH")
    clerk, manager = await field_permission_hides(c, tag)
    assert clerk[1]["credit"] == "None" and manager[1]["credit"] == "5.00"
    hidden, bobs = await row_scope_find(c, tag)
    assert hidden[0] == "SVC.AUTH.ROW_SCOPE" and bobs[0] == "ok"
    assert await row_scope_list(c, tag) == ("ok", [(f"{tag}-c",)])
    assert len((await list_pages(c, f"{tag}p"))[1]) == 5  # pages of 2 streamed to the end
    first, stale = await update_and_stale_version(c, tag)
    assert first == ("ok", {"visits": "7", "version": "2"}) and stale[0].startswith("SVC.")
    submitted, update, delete = await lifecycle_submitted_is_final(c, tag)
    assert submitted == ("ok", {"docstatus": "submitted"})
    assert update[0] == "SVC.DOC.UPDATE_NOT_DRAFT" and delete[0].startswith("SVC.DOC.")
    first_i, again, same, other = await idempotency_replays(c, tag)
    assert first_i == again and same is True and other.startswith("SVC.IDEMPOTENCY")
