"""What a workspace's clients see while its pods come and go: a killed pod, a new version.

A steady bounded load (traffic.Load: 10 requests a second, reads and writes alternating, a new
connection each) goes through the NodePort Service, i.e. through kube-proxy to whichever pods are
Ready. A pod deleted with ``kubectl delete pod`` is replaced and every write acknowledged before or
during the kill is read back afterwards (the rows live in the cluster's Postgres, not in the pod).
Registering a new version swaps it into the running pods, and a roll of the pods (the
``dap.io/artifact-binary-hash`` annotation, as a new image would) replaces them one by one: both
with no failed request, thanks to ``/ready`` (a new pod is behind the Service only once it serves),
``maxUnavailable: 0`` and the 5 s preStop drain (an old pod leaves the endpoints before it stops).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import NS, ROOT, WS, Books, Kube, record, register, workspace_pods
from traffic import Load, http

pytestmark = pytest.mark.e2e


def _ready_pods(kube: Kube) -> dict[str, str]:
    """name -> pod IP of the workspace's pods that are Ready and not terminating."""
    return {
        p["metadata"]["name"]: p["status"].get("podIP", "")
        for p in workspace_pods(kube)
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    }


def _codes(books: Books, prefix: str) -> set[str]:
    status, body = http(
        "GET", f"{books.api}/stock/item?code[like]={prefix}-%25&limit=1000&fields=code", books.token
    )
    assert status == 200, body
    return {row["code"] for row in json.loads(body)["data"]}


def test_a_deleted_pod_is_replaced_and_nothing_acknowledged_is_lost(books: Books) -> None:
    kube = books.kube
    before = _ready_pods(kube)
    assert before, "no Ready pod to kill"
    victim = sorted(before)[0]
    prefix = f"KILL{int(time.time())}"
    with Load(books.api, books.token, prefix) as load:
        kube.wait_for(
            lambda: len(load.acknowledged) >= 10, within=60, what="writes acknowledged before the kill"
        )
        killed = time.monotonic()
        kube.run("delete", "pod", victim, "-n", NS, "--wait=false")
        replacement = kube.wait_for(
            lambda: [name for name in _ready_pods(kube) if name not in before],
            within=180,
            what="a Ready replacement",
        )
        replaced = time.monotonic()
        kube.wait_for(
            lambda: victim not in {p["metadata"]["name"] for p in workspace_pods(kube)},
            within=120,
            what="the killed pod gone",
        )
        time.sleep(3)  # writes after the replacement took over
    found = _codes(books, prefix)
    lost = sorted(set(load.acknowledged) - found)
    record("kill_replacement_ready_s", round(replaced - killed, 1))
    record("kill_load", load.summary())
    assert replacement
    assert len(load.acknowledged) >= 10
    assert lost == [], f"acknowledged writes lost: {lost[:10]}"


def _next_version(tmp: Path, mark: str) -> Path:
    """examples/procurement with an optional ``note`` on stock items: a new artifact, additive."""
    copy = tmp / "procurement"
    shutil.copytree(ROOT / "examples" / "procurement", copy)
    entity = copy / "stock" / "item.yaml"
    text = entity.read_text()
    assert "    - name: active\n" in text, "examples/procurement/stock/item.yaml changed: adapt this test"
    entity.write_text(
        text.replace("    - name: active\n", "    - name: note\n      type: string\n    - name: active\n", 1)
    )
    modules = copy / "modules.yaml"
    modules.write_text(
        modules.read_text().replace("Items and their prices.", f"Items and their prices ({mark}).", 1)
    )
    return copy


def test_a_new_version_rolls_out_with_no_failed_request(books: Books, tmp_path: Path) -> None:
    kube = books.kube
    mark = f"ROLL{int(time.time())}"
    v2 = _next_version(tmp_path, mark)
    with Load(books.api, books.token, mark) as load:
        kube.wait_for(lambda: load.ok >= 20, within=60, what="the load under way")
        started = time.monotonic()
        register(kube, v2)
        kube.wait_for(
            lambda: (
                http("GET", f"{books.api}/stock/item?limit=1&fields=code,note", books.token, timeout=5)[0]
                == 200
            ),
            within=120,
            what="the new version (stock/item.note) served",
        )
        swapped = time.monotonic()
        swap_failed = load.failed
        old = set(_ready_pods(kube))
        kube.run("annotate", "workspace", WS, "-n", NS, f"dap.io/artifact-binary-hash={mark}", "--overwrite")
        kube.wait_for(
            lambda: (
                (kube.get("deployment", f"dap-{WS}", NS) or {})["spec"]["template"]["metadata"][
                    "annotations"
                ].get("dap.io/artifact-binary-hash")
                == mark
            ),
            within=60,
            what="the operator rolling the pod template",
        )
        kube.run("-n", NS, "rollout", "status", f"deployment/dap-{WS}", "--timeout=240s")
        kube.wait_for(
            lambda: not old & set(_ready_pods(kube)) and _ready_pods(kube), within=120, what="new pods only"
        )
        kube.wait_for(
            lambda: all(p["metadata"]["name"] not in old for p in workspace_pods(kube)),
            within=120,
            what="the old pods gone",
        )
        rolled = time.monotonic()
        time.sleep(3)
    record("rollout_register_to_new_version_s", round(swapped - started, 1))
    record("rollout_pods_rolled_s", round(rolled - swapped, 1))
    record("rollout_load", {**load.summary(), "failed_during_swap": swap_failed})
    assert load.ok >= 50, load.summary()
    assert load.failed == 0, f"{load.failed} failed requests: {load.failures}"
    lost = sorted(set(load.acknowledged) - _codes(books, mark))
    assert lost == [], f"acknowledged writes lost: {lost[:10]}"


def test_an_idle_workspace_scales_to_zero_and_wakes_up(books: Books) -> None:
    """The kind class has ``scaleToZero``: ``dap.io/idle: "true"`` takes the pods away (phase Idle,
    nothing behind the Service), ``"false"`` brings them back serving what was written before."""
    kube = books.kube
    code = f"IDLE{int(time.time())}"
    status, body = http(
        "POST", f"{books.api}/stock/item", books.token, {"code": code, "title": "t", "unit_price": "1"}
    )
    assert status in (200, 201), body
    try:
        kube.run("annotate", "workspace", WS, "-n", NS, "dap.io/idle=true", "--overwrite")
        kube.wait_for(
            lambda: (kube.get("workspace", WS, NS) or {})["status"]["phase"] == "Idle", what="phase Idle"
        )
        kube.wait_for(lambda: not workspace_pods(kube), within=120, what="no pod left")
        assert (kube.get("deployment", f"dap-{WS}", NS) or {})["spec"]["replicas"] == 0
    finally:
        woken = time.monotonic()
        kube.run("annotate", "workspace", WS, "-n", NS, "dap.io/idle=false", "--overwrite")
    first = kube.wait_for(
        lambda: (
            http("GET", f"{books.api}/stock/item?code={code}", books.token, timeout=5)[0] == 200
            and time.monotonic()
        ),
        within=180,
        what="the first 200 after waking",
    )
    record("wake_to_first_200_s", round(first - woken, 1))
    status, body = http("GET", f"{books.api}/stock/item?code={code}", books.token)
    assert code.encode() in body, body
    kube.wait_for(
        lambda: (kube.get("workspace", WS, NS) or {})["status"]["phase"] == "Ready", what="phase Ready"
    )
