"""Page contexts of source ``api`` in the browser (issue 28): a service action called with
params templated from the session, its ``result`` shown by a block; a failing call takes its
fallback, or is said on the page. Its own module: the server (with a native handler installed as a
real distribution on its PYTHONPATH) must start before this module's browser does.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import UiServer, serving, signed_in
from .test_access import violations
from .test_contexts import field
from .test_desk import LENDING

OFFICE = """
apiVersion: dap.io/v1
kind: Service
metadata: {name: desk, module: lending}
spec:
  expose: [{type: rest}]
  actions:
    - name: stats
      impl: {type: native, handler: lending-test-stats}
      params: {fields: [{name: who, type: string}]}
    - name: unbuilt
---
apiVersion: dap.io/v1
kind: App
metadata: {name: office, module: lending}
spec:
  title: Office
  pages: [stats]
---
apiVersion: dap.io/v1
kind: Page
metadata: {name: stats, module: lending}
spec:
  title: Desk statistics
  route: /stats
  context:
    - {name: stats, source: api, call: lending.desk.stats, params: {who: "{session.username}"}}
    - {name: broken, source: api, call: lending.desk.unbuilt}
    - {name: quiet, source: api, call: lending.desk.unbuilt, fallback: "not counted"}
  blocks:
    - props:
        title: Statistics
        fields:
          Greeting: "{context.stats.greeting}"
          Members: "{context.stats.members}"
          Quiet: "{context.quiet}"
"""

HANDLER = """
async def stats(ctx):
    count = await ctx.conn.fetchval("SELECT count(*) FROM lending__member WHERE tenant_id = $1", ctx.tenant)
    return {"greeting": "hello " + ctx.params["who"], "members": count}
"""


@pytest.fixture(scope="module")
def office(pg_server_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """The lending spec plus a service whose native handler is installed as a real distribution
    (entry point ``dap.actions``) on the server's PYTHONPATH, and a page with ``api`` contexts."""
    tmp_path = tmp_path_factory.mktemp("office")
    spec = tmp_path / "spec"
    shutil.copytree(LENDING, spec)
    (spec / "office.yaml").write_text(OFFICE)
    site = tmp_path / "site"
    site.mkdir()
    (site / "lending_test_handlers.py").write_text(HANDLER)
    info = site / "lending_test_handlers-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lending-test-handlers\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dap.actions]\nlending-test-stats = lending_test_handlers:stats\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(site))
        with serving(pg_server_dsn, spec, "contexts-api-server.log") as server:
            yield server


def test_api_contexts_call_a_service_action(office: UiServer, browser: Any) -> None:
    admin = office.token("root", ["admin"])
    status, _ = office.call("POST", "api/lending/member", admin, {"card": "A-1", "full_name": "Ann"})
    assert status == 201
    page = signed_in(browser, office, "lib", ["librarian"])
    page.goto(f"{office.url}#/a/lending/office/stats")
    expect(field(page, "Greeting")).to_have_text("hello lib")  # params templated from the session
    expect(field(page, "Members")).to_have_text("1")
    expect(field(page, "Quiet")).to_have_text("not counted")  # failed, with a fallback: quiet
    # failed without a fallback: said on the page, with the server's reason
    problems = page.locator(".context-problems")
    expect(problems).to_contain_text("Context broken:")
    expect(problems).not_to_contain_text("quiet")
    assert violations(page) == []
    page.context.close()
