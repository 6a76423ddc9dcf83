"""HTTP as the e2e tests send it, and a steady bounded load that counts what failed.

The load goes through the NodePort Service (kube-proxy), one new connection per request, so every
request is routed afresh to whichever pods are Ready at that moment: what a client behind a load
balancer sees during a rollout or a killed pod. It is bounded in rate and in time (a test stops
it), and it targets only the kind node on this machine's Docker network.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


def http(
    method: str, url: str, token: str | None = None, body: Any = None, timeout: float = 10
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class Load:
    """Reads and writes at a steady rate until stopped; each outcome counted, writes acknowledged kept."""

    base: str  # e.g. http://172.18.0.2:30080/books/api
    token: str
    prefix: str  # the codes of the items written, so a test finds them again
    rate: float = 10.0  # requests a second, reads and writes alternating
    ok: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _one(self, n: int) -> None:
        try:
            if n % 2:
                code = f"{self.prefix}-{n}"
                item = {"code": code, "title": "load", "unit_price": "1.00"}
                status, body = http("POST", f"{self.base}/stock/item", self.token, item, timeout=5)
                if status in (200, 201):
                    self.acknowledged.append(code)
            else:
                status, body = http("GET", f"{self.base}/stock/item?limit=1", self.token, timeout=5)
        except OSError as exc:  # refused, reset, timed out
            status, body = 0, str(exc).encode()
        if 200 <= status < 300:
            self.ok += 1
        else:
            self.failed += 1
            if len(self.failures) < 20:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {status} {body[:160]!r}")

    def _run(self) -> None:
        n = 0
        gap = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._one(n)
            n += 1
            next_at += gap
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=self._run, name="e2e-load", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def summary(self) -> dict[str, int]:
        return {"ok": self.ok, "failed": self.failed, "acknowledged_writes": len(self.acknowledged)}
