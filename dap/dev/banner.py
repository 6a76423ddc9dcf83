"""What ``dap dev`` prints once it serves: addresses that answer, a token, commands that work.

Every URL printed is one the running processes answer: the UI line only when a UI bundle is
installed (``GET /<workspace>/`` is the UI page and nothing else), otherwise "API only"; curl
lines only for what the running catalog exposes, and none while nothing is loaded. Create
examples fill every required field with a sample value; an entity that needs a reference gets
no create line, since no id can be known before the first record exists.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from datetime import date
from pathlib import Path
from typing import Any

from dap import server
from dap.dev import tokens

_SAMPLES: dict[str, Any] = {
    "integer": 1,
    "number": 1.5,
    "decimal": "1.50",
    "money": "10.00",
    "percent": "5",
    "boolean": True,
}


def dap_command() -> str:
    """How the person can call ``dap`` again: as they did (``.venv/bin/dap`` under ``make``)."""
    invoked = sys.argv[0] if sys.argv else ""
    if Path(invoked).name == "dap":
        return invoked
    beside = Path(sys.executable).parent / "dap"
    if not beside.exists():
        return "dap"
    try:
        return os.path.relpath(beside)
    except ValueError:  # another drive (Windows)
        return str(beside)


def example_body(resource: Any) -> dict[str, Any] | None:
    """A create body for ``resource`` (every required field); ``None`` when one needs a reference."""
    today = date.today().isoformat()
    samples = {**_SAMPLES, "date": today, "datetime": f"{today}T12:00:00Z"}
    body: dict[str, Any] = {}
    for name, field in resource.fields.items():
        if not getattr(field, "required", False) or getattr(field, "read_only", False):
            continue
        kind = str(getattr(field, "type", "string"))
        choices = getattr(field, "options", None) or []
        if kind in ("relation", "child", "file", "json", "uuid"):
            return None
        body[name] = choices[0].value if choices else samples.get(kind, f"Example {name}")
    return body


def curl_examples(
    base: str, control_url: str, admin: str | None, catalog: server.Catalog, workspace: str
) -> list[str]:
    auth = '-H "Authorization: Bearer $TOKEN"'
    lines = []
    resources = sorted(catalog.resources.values(), key=lambda r: (example_body(r) is None, r.key))
    for resource in resources[:2]:
        url = f"{base}/{workspace}/api/{resource.module}/{resource.name}"
        body = example_body(resource)
        if "create" in resource.actions and body is not None:
            data = shlex.quote(json.dumps(body))
            lines.append(f"curl -s -X POST {url} {auth} -H 'Content-Type: application/json' -d {data}")
        if "list" in resource.actions:
            lines.append(f"curl -s '{url}?limit=5' {auth}")
    if catalog.apps:
        lines.append(f"curl -s {base}/{workspace}/_ui/_meta/apps {auth}")
    lines.append(f"curl -s {base}/{workspace}/api/openapi.json")
    lines.append(f"curl -s {base}/health")
    lines.append(f"curl -s '{control_url}/v1/snapshot?workspace={workspace}'")
    if admin:
        lines.append(f"curl -s {admin}/metrics | grep dap_http_requests_total")
    return lines


def render(
    *,
    workspace: str,
    base: str,
    web_dir: Path | None,
    status: dict[str, Any],
    catalog: server.Catalog,
    control_url: str,
    admin: str | None,
    admin_secret: str,
    data: str,
    watch: bool,
    setup_code: str | None = None,
) -> list[str]:
    """The banner's lines (without the trailing newline)."""
    dap = dap_command()
    served = status.get("artifact_id") is not None
    lines = [""]
    if web_dir is not None:
        lines.append(f"dap dev: workspace {workspace!r}: UI at {base}/{workspace}/ (bundle {web_dir})")
    else:
        lines.append(f"dap dev: workspace {workspace!r}: API only (no UI bundle found)")
    lines.append(f"  REST    {base}/{workspace}/api/<module>/<entity>   (OpenAPI: .../api/openapi.json)")
    if served and status.get("phase") in ("failed", "rolled_back"):
        lines.append(
            f"  still serving the previous version {status['version']} ({status['artifact_id']}): "
            "the newest was not loaded (see above)"
        )
    elif served:
        lines.append(
            f"  serving artifact {status['artifact_id']} version {status['version']} ({status['phase']})"
        )
    else:
        lines.append("  serving nothing yet: no version of this spec is loaded (see above)")
    lines.append(f"  control {control_url} (standalone, dev)")
    if admin:
        lines.append(f"  admin   {admin} (bearer {admin_secret} for /workspaces)")
    if setup_code is not None:
        lines.append(
            f"  setup   first admin of {workspace!r}: POST {base}/{workspace}/_ui/setup with "
            f'{{"username", "password", "setup_code": "{setup_code}"}} (single use, 24 h)'
        )
    lines.append(f"  data    {data}")
    lines.append("")
    lines.append(f"an admin token (HS256, dev secret {tokens.DEV_SECRET!r}, 24 h):")
    lines.append(f"  export TOKEN={tokens.dev_token(workspace)}")
    roles = sorted(catalog.grants.patterns)
    if roles:
        lines.append(
            f"  roles of this spec: {', '.join(roles)}; a token for one: "
            f"export T2=$({dap} token --role {roles[0]} --username alice)"
        )
    else:
        lines.append(f"  other tokens (roles, username, attrs, lifetime): {dap} token --help")
    if served:
        lines.append("")
        lines.append("try:")
        lines.extend("  " + line for line in curl_examples(base, control_url, admin, catalog, workspace))
    lines.append("")
    if watch:
        lines.append("watching the spec directory for changes; Ctrl-C stops everything")
    else:
        lines.append("Ctrl-C stops everything (add --watch to roll in every saved change)")
    return lines
