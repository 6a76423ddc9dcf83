"""A spec with a service and async actions, and its native handlers as a real installed distribution.

Shared by ``test_services*``, ``test_jobs*`` and ``test_rate_limits*``. The handlers are
registered through real entry-point metadata (a ``*.dist-info`` directory on ``sys.path`` or on a
subprocess's ``PYTHONPATH``), as a deployed application would register them.
"""

from __future__ import annotations

from pathlib import Path

SPEC = {
    "ops/module.yaml": """
apiVersion: dap.io/v1
kind: Module
metadata: {name: ops}
spec: {title: Operations}
""",
    "ops/tools.yaml": """
apiVersion: dap.io/v1
kind: Service
metadata: {name: tools, module: ops}
spec:
  title: Tools
  description: Things to run without a record
  expose: [{type: rest}]
  actions:
    - name: echo
      description: Say it back
      audit: true
      emits: echoed
      idempotent: true
      impl: {type: native, handler: ops-test-echo}
      params:
        fields:
          - {name: text, type: string, required: true}
          - {name: times, type: integer}
      conditions:
        - {script: "params.text != 'no'", message: Say something other than no.}
    - name: hello
      public: true
      impl: {type: native, handler: ops-test-echo}
      rate_limit: {requests: 2, per: 60s, key: ip}
    - name: quota
      impl: {type: native, handler: ops-test-echo}
      rate_limit: {requests: 3, per: 60s, key: tenant}
    - name: secret
      required_permission: ops.tools.secret
      impl: {type: native, handler: ops-test-echo}
    - {name: off, disabled: true, impl: {type: native, handler: ops-test-echo}}
    - {name: grpc_only, expose: [grpc], impl: {type: native, handler: ops-test-echo}}
    - {name: bridge, impl: {type: sidecar}}
    - {name: empty}
    - name: crunch
      call: async
      track: true
      impl: {type: native, handler: ops-test-slow}
      idempotent: true
      params:
        fields:
          - {name: tag, type: string, required: true}
          - {name: hold, type: string}
          - {name: seconds, type: number}
      callback:
        channel: webhook
        header: X-Reply-To
        sign: true
        retry: {max_attempts: 3, backoff: 50ms, multiplier: 2}
    - name: boom
      call: async
      impl: {type: native, handler: ops-test-boom}
      callback: {channel: webhook, retry: {max_attempts: 2, backoff: 50ms}}
""",
    "ops/task.yaml": """
apiVersion: dap.io/v1
kind: Entity
metadata: {name: task, module: ops}
spec:
  fields:
    - {name: title, type: string, required: true}
  actions:
    - name: finish
      call: async
      track: true
      audit: true
      emits: finished
      impl: {type: native, handler: ops-test-slow}
      params:
        fields:
          - {name: tag, type: string, required: true}
          - {name: hold, type: string}
  events:
    - {name: finished, type: async}  # emitted by an async action: delivered after it, not before
  state_machine:
    states: [open, done]
    transitions:
      - {name: finish, from: open, to: done, action: finish}
  expose: [{type: rest}]
""",
}

HANDLERS = '''
import asyncio
import os


async def echo(ctx):
    return {
        "params": dict(ctx.params),
        "entity": ctx.entity,
        "record": ctx.record,
        "user": ctx.principal_username,
    }


async def slow(ctx):
    """Reports progress, waits while the file ``hold`` exists, and writes one effect row."""
    await ctx.progress(10)
    hold = ctx.params.get("hold")
    while hold and os.path.exists(hold):
        await asyncio.sleep(0.05)
    await ctx.progress(60)
    await ctx.progress(30)  # lower than before: ignored
    await asyncio.sleep(float(ctx.params.get("seconds") or 0))
    await ctx.conn.execute("INSERT INTO public.job_effects (tag) VALUES ($1)", ctx.params["tag"])
    return {"tag": ctx.params["tag"], "pid": os.getpid()}


async def boom(ctx):
    raise RuntimeError("the handler broke")
'''

EFFECTS = "CREATE TABLE IF NOT EXISTS public.job_effects (tag text NOT NULL, at timestamptz DEFAULT now())"


def install_handlers(root: Path) -> Path:
    """Write the handler module and its entry-point metadata under ``root``; the path to add."""
    (root / "ops_test_handlers.py").write_text(HANDLERS)
    info = root / "ops_test_handlers-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ops-test-handlers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dap.actions]\n"
        "ops-test-echo = ops_test_handlers:echo\n"
        "ops-test-slow = ops_test_handlers:slow\n"
        "ops-test-boom = ops_test_handlers:boom\n"
    )
    return root


def write_spec(folder: Path) -> Path:
    for name, text in SPEC.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder
