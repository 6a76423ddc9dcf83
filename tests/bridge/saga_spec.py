"""The saga tests' spec: the bridge tests' spec plus ``store/trip``, whose saga actions reach the
test app process (``saga_target``) as app-process actions and over HTTP on ``port``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.bridge.conftest import SPEC


def write(directory: Path, port: int, *, timeout: str = "1s", retries: int = 1) -> Path:
    """The spec under ``directory``; ``book`` is hold (app process) → charge (HTTP) → notify
    (HTTP, compensation none); ``checked`` is the same with status checks; ``tallied`` is one
    app-process step that writes through ``/ctx`` (``store/desk/tally``: the item's stock), then
    fails when its params say so, then notify."""
    spec = directory / "spec"
    shutil.copytree(SPEC, spec)
    url = f"http://127.0.0.1:{port}/saga"
    common = f"timeout: {timeout}, retries: {retries}"

    def steps(checked: bool) -> str:
        hold_status = ", status: {sidecar: store/trip/hold_status}" if checked else ""
        charge_status = f", status: {{http: {{url: '{url}/status/charge'}}}}" if checked else ""
        notify_status = f", status: {{http: {{url: '{url}/status/notify'}}}}" if checked else ""
        hold = "{name: hold, sidecar: store/trip/hold, compensation: {sidecar: store/trip/hold_undo}"
        charge = f"{{name: charge, http: {{url: '{url}/do/charge'}}, " + (
            f"compensation: {{http: {{url: '{url}/undo/charge'}}}}"
        )
        notify = f"{{name: notify, http: {{url: '{url}/do/notify'}}, compensation: none"
        return "".join(
            f"\n          - {head}, {common}{tail}}}"
            for head, tail in ((hold, hold_status), (charge, charge_status), (notify, notify_status))
        )

    params = """
      params:
        fields:
          - {name: faults, type: json}
          - {name: slow_s, type: number}"""
    (spec / "store" / "trip.yaml").write_text(
        f"""apiVersion: dap.io/v1
kind: Service
metadata: {{name: trip, module: store}}
spec:
  title: Trip
  expose: [{{type: rest}}, {{type: ws}}]
  actions:
    - name: book
      call: async
      track: true{params}
      impl:
        type: saga
        steps:{steps(False)}
    - name: checked
      call: async
      track: true{params}
      impl:
        type: saga
        steps:{steps(True)}
    - name: tallied
      call: async
      track: true
      params:
        fields:
          - {{name: item, type: uuid, required: true}}
          - {{name: amount, type: integer, required: true}}
          - {{name: fail, type: string}}
          - {{name: faults, type: json}}
      impl:
        type: saga
        steps:
          - {{name: tally, sidecar: store/desk/tally, compensation: none, timeout: 5s, retries: 0}}
          - {{name: notify, http: {{url: '{url}/do/notify'}}, compensation: none, {common}}}
"""
    )
    return spec
