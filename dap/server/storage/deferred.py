"""A transaction that begins with the first statement that needs it, or never.

A create whose only statement is its row and its event in one data-modifying statement
(``events.builtin.joined``) needs no ``BEGIN`` and ``COMMIT`` around it: one statement committed
by itself is atomic, and the pair costs two of its three round trips (issue 27,
docs/performance.md). Whether a write is that simple is only known part-way through it -- a
relation to check (``FOR KEY SHARE``, held to the commit), a derived value read, an audit row --
so the transaction is deferred instead of decided up front: :class:`Deferred` sends ``BEGIN``
before the first statement sent through it the usual way, and :meth:`Deferred.alone` sends one
statement committed by itself while nothing has begun. Once a statement went alone, any further
statement through the usual way is refused (``RuntimeError``): it would run outside the
statement it belongs with, which is a bug of the caller, never a choice.

:func:`deferred` is :func:`db.committed` for such a connection: it commits what began (with the
same 503 when the commit is lost) and rolls back on an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from asyncpg.transaction import Transaction

from dap.server.storage import db

if TYPE_CHECKING:  # generic in its stubs only
    _Proxy = PoolConnectionProxy[asyncpg.Record]
else:
    _Proxy = PoolConnectionProxy


class Deferred(_Proxy):
    """A connection of the pool (through the proxy it came as) whose transaction is deferred.

    Statement methods (``execute``, ``fetch*``, ``executemany``, ``prepare``, ``copy_*``) begin
    the transaction first; ``transaction()`` and ``cursor()`` need it begun already (nothing on the
    deferred paths opens a savepoint or a cursor first). Everything else goes to the connection.
    """

    __slots__ = ("_alone", "_reading", "_transaction")

    def __init__(self, conn: db.Connection) -> None:  # no super().__init__: not a proxy of the pool
        self._con = conn  # the pool's proxy (or a plain connection): released with it, as ever
        self._transaction: Transaction | None = None
        self._alone = False
        self._reading = False

    @property
    def pristine(self) -> bool:
        """Nothing was sent through this connection yet (no transaction, no lone statement)."""
        return self._transaction is None and not self._alone

    @property
    def begun(self) -> bool:
        return self._transaction is not None

    async def _begin(self) -> None:
        if self._transaction is not None or self._reading:
            return
        if self._alone:
            raise RuntimeError("a statement after one sent alone: it would not be part of its write")
        transaction = self._con.transaction()
        await transaction.start()
        self._transaction = transaction

    async def alone(self, query: str, *args: Any) -> asyncpg.Record | None:
        """Send ``query`` committed by itself (autocommit): its first row, if any.

        Only while nothing has begun. A connection lost during it leaves the outcome unknown, as a
        lost ``COMMIT`` does: 503 ``SVC.DB.OUTCOME_UNKNOWN`` (``db.committed``).
        """
        if self._transaction is not None:
            raise RuntimeError("a statement sent alone inside a begun transaction")
        was, self._alone = self._alone, True
        try:
            row: asyncpg.Record | None = await self._con.fetchrow(query, *args)
        except db.UNREACHABLE as exc:
            raise db.outcome_unknown() from exc
        except BaseException:  # refused: nothing was written, as if it had not been sent
            self._alone = was
            raise
        return row

    @contextlib.contextmanager
    def unlocked(self) -> Iterator[None]:
        """Statements sent alone (autocommitted) inside the block, before anything has begun: reads
        of a write that checks in its own statement that what it read is still so (a version)."""
        if not self.pristine:
            raise RuntimeError("unlocked reads come first")
        self._reading = True
        try:
            yield
        finally:
            self._reading = False

    def undone(self) -> None:
        """The statement sent alone wrote nothing (it returned none of the rows it writes): nothing
        is bound to it, and the connection is as it was before it."""
        self._alone = False

    async def finish(self) -> None:
        """Commit what began (nothing when nothing did)."""
        transaction, self._transaction = self._transaction, None
        if transaction is None:
            return
        try:
            await transaction.commit()
        except db.UNREACHABLE as exc:
            raise db.outcome_unknown() from exc

    async def abandon(self) -> None:
        """Roll back what began (an error ended the write)."""
        transaction, self._transaction = self._transaction, None
        if transaction is None:
            return
        with contextlib.suppress(*db.UNREACHABLE, asyncpg.InterfaceError):
            await transaction.rollback()

    # --- statement methods: the transaction begins first (the signatures are asyncpg's) -------

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.execute(*args, **kwargs)

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.executemany(*args, **kwargs)

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.fetch(*args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.fetchrow(*args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.fetchval(*args, **kwargs)

    async def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.fetchmany(*args, **kwargs)

    async def prepare(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.prepare(*args, **kwargs)

    async def copy_from_table(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.copy_from_table(*args, **kwargs)

    async def copy_from_query(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.copy_from_query(*args, **kwargs)

    async def copy_to_table(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.copy_to_table(*args, **kwargs)

    async def copy_records_to_table(self, *args: Any, **kwargs: Any) -> Any:
        await self._begin()
        return await self._con.copy_records_to_table(*args, **kwargs)

    def transaction(self, *args: Any, **kwargs: Any) -> Any:
        if self._transaction is None:
            raise RuntimeError("a savepoint on a deferred transaction that has not begun")
        return self._con.transaction(*args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        if self._transaction is None:
            raise RuntimeError("a cursor on a deferred transaction that has not begun")
        return self._con.cursor(*args, **kwargs)


def deferred(conn: db.Connection) -> Deferring:
    """``conn`` with its transaction deferred (:class:`Deferred`), committed at the end of the
    block, rolled back on an error: ``async with deferred(conn) as lazy``."""
    return Deferring(conn)


class Deferring:
    """:func:`deferred`'s context. A class rather than an ``asynccontextmanager`` generator (as
    ``db.connection``): every create and update enters one, and the generator's machinery (its
    context manager, the loop's async-generator hooks) ran 130 bytecodes of it per write."""

    __slots__ = ("_lazy",)

    def __init__(self, conn: db.Connection) -> None:
        self._lazy = Deferred(conn)

    async def __aenter__(self) -> Deferred:
        return self._lazy

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if exc_type is not None:
            await self._lazy.abandon()
            return  # the error goes on
        await self._lazy.finish()
