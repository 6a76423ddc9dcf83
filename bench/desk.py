"""The desk's load figures: the first load of a list page of 50 rows, cold and warm, on loopback.

    .venv/bin/python bench/desk.py [--rows 500] [--rounds 5] [--quick]

``dap serve`` serves tests/ui/specs/lending (not the example) with the built bundle on an
embedded Postgres (or ``DAP_BENCH_DSN``); ``--rows`` books are created through the REST API. Headless
Debian Chromium opens the Books page (50 rows a page, counted). *Cold*: a fresh browser context
(empty cache) from navigation to the 50th row on screen. *Warm*: the same context loading the page
again (a new tab), where the hashed assets come from the cache (``immutable``) and the index is
revalidated (304). Each prints the median of ``--rounds`` and the bytes the page transferred
(``transferSize`` of the navigation and its resources: compressed bodies and headers).

*Realtime context*: a member renamed through the API while its Member card page (a ``realtime:
true`` page context, docs/ui.md "Page contexts") is open: milliseconds from sending the PATCH to
the new name on screen; the baseline, in the same run, is the member's record page (the form's
own live reload over the same socket).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from ui import SECRET, create_database, port, token  # the UI benchmark's own helpers

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "dap" / "server" / "web" / "bundle"
SPEC = ROOT / "tests" / "ui" / "specs" / "lending"
DAP = str(Path(sys.executable).parent / "dap")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
ROW_50 = "() => document.querySelectorAll('main table tbody tr').length >= 50"
TIMING = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const all = [nav, ...performance.getEntriesByType('resource')];
  return { ms: performance.now(), bytes: all.reduce((n, e) => n + (e.transferSize || 0), 0) };
}"""


def post(api: str, path: str, bearer: str, body: Any) -> None:
    request = urllib.request.Request(
        f"{api}/default/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 201


def bundle_size() -> tuple[int, int]:
    files = [p for p in BUNDLE.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return sum(p.stat().st_size for p in files), sum(len(gzip.compress(p.read_bytes(), 9)) for p in files)


def load_once(context: Any, url: str) -> dict[str, float]:
    page = context.new_page()
    page.goto(url)
    page.wait_for_function(ROW_50, timeout=30_000)
    figures: dict[str, float] = page.evaluate(TIMING)
    page.close()
    return figures


def patch(api: str, path: str, bearer: str, body: Any) -> None:
    request = urllib.request.Request(
        f"{api}/default/{path}",
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200


def rename_ms(context: Any, url: str, api: str, bearer: str, member: str, rounds: int) -> list[float]:
    """Open ``url`` (a page showing ``member``'s name), rename the member ``rounds`` times through
    the API; each time the milliseconds until the page shows the new name."""
    page = context.new_page()
    page.goto(url)
    page.wait_for_function("() => document.documentElement.dataset.live === 'live'", timeout=30_000)
    page.wait_for_function(
        "() => document.querySelector('main h2')?.innerText.includes('Member')", timeout=30_000
    )
    page.wait_for_timeout(500)  # the page's subscriptions reach the server
    out = []
    for i in range(rounds):
        name = f"Member {i} {uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        patch(api, f"api/lending/member/{member}", bearer, {"full_name": name})
        shown = f"() => document.querySelector('main').innerText.includes({name!r})"
        page.wait_for_function(shown, timeout=30_000, polling=5)
        out.append((time.perf_counter() - started) * 1000)
    page.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small and short: proves the benchmark runs")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 60, 1
    if not (BUNDLE / "index.html").is_file():
        print("no UI bundle: run `make ui` (needs npm); nothing measured")
        return 0
    raw, packed = bundle_size()
    print(f"bundle: {raw / 1024:.1f} KiB, {packed / 1024:.1f} KiB gzip (budget 60 KiB)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("Chromium not found: load figures skipped")
        return 0
    from playwright.sync_api import sync_playwright

    from dap import embedded

    tmp = Path(tempfile.mkdtemp(prefix="dap-bench-desk-"))
    server_dsn, pg = os.environ.get("DAP_BENCH_DSN"), None
    if server_dsn is None:
        server_dsn, pg = embedded.start(tmp / "pg")
    proc: subprocess.Popen[str] | None = None
    try:
        name = f"bench_desk_{uuid.uuid4().hex[:8]}"
        asyncio.run(create_database(server_dsn, name))
        api_port = port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAP_")}
        env.update({"DAP_DSN": embedded.dsn_for_database(server_dsn, name), "DAP_JWT_SECRET": SECRET})
        env["DAP_CORS_ORIGIN"] = "http://localhost:3000"
        log = tmp / "serve.log"
        with log.open("w") as sink:
            args_ = [
                DAP,
                "serve",
                "--spec",
                str(SPEC),
                "--addr",
                f"127.0.0.1:{api_port}",
                "--metrics-addr",
                "",
            ]
            proc = subprocess.Popen(args_, env=env, stderr=sink, stdout=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 120
        while "dap serve: listening" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"dap serve did not start: {log.read_text()[-1500:]}")
            time.sleep(0.1)
        api = f"http://127.0.0.1:{api_port}"
        bearer = token()
        for i in range(args.rows):
            post(
                api,
                "api/lending/book",
                bearer,
                {"isbn": f"978-{i:07d}", "headline": f"Book {i}", "author": "A"},
            )
        request = urllib.request.Request(
            f"{api}/default/api/lending/member",
            data=json.dumps({"card": "B-1", "full_name": "Member"}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            member = json.load(resp)["data"]["id"]
        url = f"{api}/default/#/a/lending/desk/books"
        init = f"sessionStorage.setItem('dap.token.default', {bearer!r});"
        cold: list[dict[str, float]] = []
        warm: list[dict[str, float]] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                first = browser.new_context()
                first.add_init_script(init)
                load_once(first, url)  # Chromium's own start-up is not the page's
                first.close()
                for _ in range(args.rounds):
                    context = browser.new_context()
                    context.add_init_script(init)
                    cold.append(load_once(context, url))
                    warm.append(load_once(context, url))
                    context.close()
                context = browser.new_context()
                context.add_init_script(init)
                renames = 3 if args.quick else 20
                card = f"{api}/default/#/a/lending/desk/card/{member}"
                form = f"{api}/default/#/a/lending/desk/member/{member}"
                live = {
                    "Member card, realtime context": rename_ms(context, card, api, bearer, member, renames),
                    "member record page (baseline)": rename_ms(context, form, api, bearer, member, renames),
                }
                context.close()
            finally:
                browser.close()
        for label, runs in (("cold", cold), ("warm", warm)):
            ms = statistics.median(r["ms"] for r in runs)
            kib = statistics.median(r["bytes"] for r in runs) / 1024
            rounds = ", ".join(f"{r['ms']:.0f}" for r in runs)
            print(
                f"Books list, 50 of {args.rows} rows, {label}: median {ms:.0f} ms, {kib:.1f} KiB transferred"
            )
            print(f"  rounds, ms: {rounds}")
        for label, ms_list in live.items():
            print(
                f"rename by the API -> shown, {label}, {len(ms_list)} rounds: "
                f"median {statistics.median(ms_list):.0f} ms, max {max(ms_list):.0f} ms"
            )
        return 0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if pg is not None:
            embedded.stop(pg, tmp / "pg")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
