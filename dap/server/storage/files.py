"""The bytes of ``file`` fields on the local filesystem: the spec's storage fallback.

Layout under the root (``$DAP_STATE_DIR/files``, default ``.dap/files``; ephemeral in a container
unless a volume is mounted there)::

    <tenant>/<table>/<record id>/<field>/<token>          the bytes
    <tenant>/<table>/<record id>/<field>/<token>.json     {"name", "mime", "size"}

The record's column holds the token (random, 32 hex digits). A file is written to a temporary
name while it streams in, checked against the field's ``max_bytes`` as it grows, and renamed into
place only once the record's transaction has stored its token; the previous file of the field is
removed after that. Deleting the record removes its directory. Every path is built from the
tenant, the table and ids this server made, never from a client's file name.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

CHUNK = 64 * 1024


class TooLargeError(ValueError):
    """The body grew past the field's ``max_bytes``."""


@dataclass(frozen=True)
class Stored:
    token: str
    size: int
    temporary: Path
    final: Path


def default_root() -> Path:
    return Path(os.environ.get("DAP_STATE_DIR", ".dap")) / "files"


@dataclass(frozen=True)
class FileStore:
    root: Path

    def record_dir(self, tenant: uuid.UUID, table: str, record_id: uuid.UUID) -> Path:
        return self.root / str(tenant) / table / str(record_id)

    def path(self, tenant: uuid.UUID, table: str, record_id: uuid.UUID, field: str, token: str) -> Path:
        if not token.isalnum():  # only tokens this store made
            raise FileNotFoundError(token)
        return self.record_dir(tenant, table, record_id) / field / token

    async def receive(
        self,
        chunks: AsyncIterator[bytes],
        *,
        tenant: uuid.UUID,
        table: str,
        record_id: uuid.UUID,
        field: str,
        max_bytes: int | None,
        name: str,
        mime: str,
    ) -> Stored:
        """Stream ``chunks`` to a temporary file; ``TooLargeError`` (nothing kept) past ``max_bytes``."""
        token = secrets.token_hex(16)
        final = self.path(tenant, table, record_id, field, token)
        final.parent.mkdir(parents=True, exist_ok=True)
        temporary = final.with_name(f".{token}.part")
        size = 0
        try:
            with temporary.open("wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:
                        raise TooLargeError(f"the file is larger than {max_bytes} bytes")
                    out.write(chunk)
            final.with_suffix(".json").write_text(json.dumps({"name": name, "mime": mime, "size": size}))
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return Stored(token, size, temporary, final)

    def keep(self, stored: Stored) -> None:
        stored.temporary.replace(stored.final)

    def drop(self, stored: Stored) -> None:
        stored.temporary.unlink(missing_ok=True)
        stored.final.with_suffix(".json").unlink(missing_ok=True)

    def remove(self, tenant: uuid.UUID, table: str, record_id: uuid.UUID, field: str, token: str) -> None:
        """Remove the file ``token`` names; a value this store never made (a JSON body may have set
        the column to any string) names nothing to remove."""
        try:
            path = self.path(tenant, table, record_id, field, token)
        except FileNotFoundError:
            return
        path.unlink(missing_ok=True)
        path.with_suffix(".json").unlink(missing_ok=True)

    def meta(self, path: Path) -> dict[str, object]:
        try:
            found: dict[str, object] = json.loads(path.with_suffix(".json").read_text())
        except (OSError, ValueError):
            return {}
        return found

    def remove_record(self, tenant: uuid.UUID, table: str, record_id: uuid.UUID) -> None:
        shutil.rmtree(self.record_dir(tenant, table, record_id), ignore_errors=True)
