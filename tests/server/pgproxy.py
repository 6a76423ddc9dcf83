"""A loopback TCP relay in front of the test Postgres that can fail the way networks do.

Real Postgres, real asyncpg, a real broken socket: the relay forwards bytes both ways and, when
told, closes every connection (``down``), refuses new ones, or breaks the one connection that is
committing: after relaying the server's answer to ``COMMIT`` (``after_commit``: the write is
committed and the client knows it) or before (``during_commit``: committed, but the client never
hears so). ``break_statement`` does the same to a statement committed by itself (autocommit, no
``COMMIT``): the first one whose text, sent to be parsed, holds ``statement_marker``; its answer
is one row (asyncpg's ``fetchrow`` asks for one: the portal is suspended after it, and the
statement commits at the ``Sync`` that follows).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import parse_qs, urlsplit

COMMIT_QUERY = b"COMMIT"
COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"  # CommandComplete with the tag COMMIT
READY = b"Z\x00\x00\x00\x05"  # ReadyForQuery
ONE_ROW_DONE = b"s\x00\x00\x00\x04"  # PortalSuspended: the one row asked for was sent


class PgProxy:
    """Relays connections for ``dsn`` (TCP or the embedded server's unix socket); ``dsn`` after
    ``start`` is the same database reached through the relay."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query)
        self._database = parts.path.lstrip("/")
        self._user = parts.username or "postgres"
        socket_dir = query.get("host", [""])[0]
        port = parts.port or int(query.get("port", ["5432"])[0])
        self._unix = f"{socket_dir}/.s.PGSQL.{port}" if socket_dir.startswith("/") else None
        self._tcp = (parts.hostname or "127.0.0.1", port)
        self.dsn = ""
        self.down = False
        self.break_commit: str | None = None  # "after_commit" or "during_commit", once
        self.broken = asyncio.Event()
        self.break_statement: str | None = None  # "after" or "during", once
        self.statement_marker = b""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        self.dsn = f"postgresql://{self._user}@127.0.0.1:{port}/{self._database}"
        return port

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        """Close every relayed connection now."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.down:
            client_w.transport.abort()
            return
        try:
            if self._unix is not None:
                server_r, server_w = await asyncio.open_unix_connection(self._unix)
            else:
                server_r, server_w = await asyncio.open_connection(*self._tcp)
        except OSError:
            client_w.transport.abort()
            return
        self._writers |= {client_w, server_w}
        committing = asyncio.Event()

        armed = asyncio.Event()  # the statement to break was sent

        def kill() -> None:
            self.break_commit = None
            self.break_statement = None
            for w in (client_w, server_w):
                w.transport.abort()
                self._writers.discard(w)
            self.broken.set()

        async def upstream() -> None:
            while data := await client_r.read(65536):
                server_w.write(data)
                if self.break_statement and self.statement_marker and self.statement_marker in data:
                    armed.set()
                if self.break_commit and COMMIT_QUERY in data:
                    committing.set()
                    if self.break_commit == "during_commit":
                        await server_w.drain()
                        await asyncio.sleep(0.2)  # Postgres commits; its answer is never relayed
                        kill()
                        return

        async def downstream() -> None:
            seen = b""
            while data := await server_r.read(65536):
                if self.break_commit == "during_commit" and committing.is_set():
                    continue  # the answer to COMMIT never reaches the client
                if self.break_statement and armed.is_set():
                    seen += data
                    at = seen.find(ONE_ROW_DONE)
                    if at >= 0 and READY in seen[at:]:  # the statement ran and committed (Sync)
                        if self.break_statement == "after":
                            client_w.write(data)
                            await client_w.drain()
                            # closed, not aborted: the client reads the answer, then the end
                            client_w.close()
                            server_w.transport.abort()
                            self._writers -= {client_w, server_w}
                            self.break_statement = None
                            self.broken.set()
                            return
                        kill()  # "during": its answer never reaches the client
                        return
                    client_w.write(data)
                    continue
                client_w.write(data)
                if self.break_commit == "after_commit" and committing.is_set():
                    seen += data
                    at = seen.find(COMMIT_DONE)
                    if at >= 0 and READY in seen[at:]:  # the whole answer to COMMIT is on its way
                        await client_w.drain()
                        kill()
                        return

        # when one side ends, so does the other (Postgres closes after Terminate; asyncpg waits for it)
        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for w in (client_w, server_w):
            w.transport.abort()
            self._writers.discard(w)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(OSError, asyncio.CancelledError, asyncio.IncompleteReadError):
                await task
