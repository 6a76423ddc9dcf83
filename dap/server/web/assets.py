"""The UI bundle over HTTP: compressed, and cached by the browser for as long as it can be.

Vite names every asset after a hash of its content (``index-B2x9aQ.js``), so an asset under
``/assets/`` never changes under its name: it is sent with ``Cache-Control: public,
max-age=31536000, immutable`` and a warm load asks the server nothing for it. ``index.html``
names the current assets, so it is revalidated on every load (``no-cache`` with an ``ETag``: a
304 when unchanged). Text bodies (JS, CSS, HTML, SVG, JSON) go gzip-compressed to clients that
accept it, with ``Vary: Accept-Encoding``; each file is compressed once, on its first request, and
kept in memory with its ETag (a bundle is a few files, tens of KiB). Brotli would save a few more
per cent but needs a dependency; gzip is in the standard library.

Only flat file names inside the bundle's ``assets/`` are served (no ``..``, no subdirectories):
the same surface aiohttp's ``add_static`` gave before, with headers it could not set.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # fullmatch: "$" would pass "a.js\n"
# a Vite build name: stem, '-', a hash of 8 or more URL-safe characters, extension
HASHED = re.compile(r".+-[A-Za-z0-9_-]{8,}\.[a-z0-9]+")


@dataclass(frozen=True)
class Body:
    raw: bytes
    packed: bytes | None  # gzip, when the type is text-like and it helps
    etag: str
    content_type: str


def load(path: Path) -> Body:
    raw = path.read_bytes()
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    packed = None
    if content_type.startswith(COMPRESSIBLE):
        candidate = gzip.compress(raw, compresslevel=9, mtime=0)
        packed = candidate if len(candidate) < len(raw) else None
    etag = '"' + hashlib.sha256(raw).hexdigest()[:32] + '"'
    return Body(raw=raw, packed=packed, etag=etag, content_type=content_type)


def accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` header allows gzip (``gzip;q=0`` refuses it)."""
    for part in header.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and float(q[2:] or "0") == 0)
    return False


def respond(request: web.Request, body: Body, cache_control: str) -> web.Response:
    headers = {"Cache-Control": cache_control, "ETag": body.etag, "Vary": "Accept-Encoding"}
    if body.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = body.content_type
    if body.packed is not None and accepts_gzip(request.headers.get("Accept-Encoding", "")):
        headers["Content-Encoding"] = "gzip"
        return web.Response(body=body.packed, headers=headers)
    return web.Response(body=body.raw, headers=headers)


class Bundle:
    """The files of one built bundle, loaded on first request and kept (they never change)."""

    def __init__(self, web_dir: Path) -> None:
        self.web_dir = web_dir
        self.assets = web_dir / "assets"
        self._cache: dict[Path, Body] = {}

    def body(self, path: Path) -> Body:
        hit = self._cache.get(path)
        if hit is None:
            hit = self._cache[path] = load(path)
        return hit

    async def asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        path = self.assets / name
        if not SAFE_NAME.fullmatch(name) or not path.is_file():
            raise web.HTTPNotFound()
        return respond(request, self.body(path), IMMUTABLE if HASHED.fullmatch(name) else REVALIDATE)

    def index(self, request: web.Request) -> web.Response:
        return respond(request, self.body(self.web_dir / "index.html"), REVALIDATE)


def add_routes(app: web.Application, bundle: Bundle) -> None:
    if bundle.assets.is_dir():
        app.router.add_get("/assets/{name}", bundle.asset)
