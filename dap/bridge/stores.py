"""Cache and lock backends of the ``/ctx`` primitives: ``memory`` and ``valkey``/``redis``.

Both keep keys under the tenant (``dap:{tenant}:cache:{key}``), so one workspace never reads or
clears another's. A lock is ``SET key token NX PX ttl``; each acquisition also takes the next
fencing token of its key (a counter that never goes back), which the app passes to whatever the
lock protects so that a holder whose lock expired is recognised by a smaller token. Release
deletes the key only when it still holds the caller's token (compare-and-delete, atomic in a
Lua script on redis).

A redis backend connects on first use when the datastore says ``lazy``, else at start; its pool
is ``max_open`` connections (redis-py's ``max_connections``) and it is replaced once it is older
than ``max_lifetime``. redis-py has no idle cap, so ``max_idle`` is not enforced there.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

import redis.asyncio as aioredis

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


class Backend(Protocol):
    async def get(self, key: str) -> Any: ...
    async def set(self, key: str, value: Any, ttl: float | None) -> None: ...
    async def delete(self, key: str) -> bool: ...
    async def acquire(self, key: str, ttl: float) -> int | None: ...
    async def release(self, key: str, token: int) -> bool: ...
    async def ping(self) -> None: ...
    async def close(self) -> None: ...


class Memory:
    """One process's dict: for dev and single-process deployments (not shared between pods)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[float | None, Any]] = {}
        self._locks: dict[str, tuple[float, int]] = {}
        self._fences: dict[str, int] = {}

    async def get(self, key: str) -> Any:
        found = self._values.get(key)
        if found is None:
            return None
        if found[0] is not None and found[0] <= time.monotonic():
            del self._values[key]
            return None
        return found[1]

    async def set(self, key: str, value: Any, ttl: float | None) -> None:
        self._values[key] = (time.monotonic() + ttl if ttl else None, value)

    async def delete(self, key: str) -> bool:
        return self._values.pop(key, None) is not None

    async def acquire(self, key: str, ttl: float) -> int | None:
        held = self._locks.get(key)
        if held is not None and held[0] > time.monotonic():
            return None
        token = self._fences[key] = self._fences.get(key, 0) + 1
        self._locks[key] = (time.monotonic() + ttl, token)
        return token

    async def release(self, key: str, token: int) -> bool:
        held = self._locks.get(key)
        if held is None or held[1] != token or held[0] <= time.monotonic():
            return False
        del self._locks[key]
        return True

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class Redis:
    """valkey or redis over redis-py's asyncio client."""

    def __init__(self, url: str, *, max_open: int | None = None, max_lifetime: float | None = None) -> None:
        self.url = url
        self.max_open = max_open
        self.max_lifetime = max_lifetime
        self._client: aioredis.Redis | None = None
        self._born = 0.0

    def _connect(self) -> aioredis.Redis:
        now = time.monotonic()
        if self._client is not None and self.max_lifetime and now - self._born > self.max_lifetime:
            old, self._client = self._client, None
            self._retired = old  # closed on the next close(); in-flight calls finish on it
        if self._client is None:
            self._client = aioredis.Redis.from_url(self.url, max_connections=self.max_open)
            self._born = now
        return self._client

    async def get(self, key: str) -> Any:
        raw = await self._connect().get(key)
        return None if raw is None else json.loads(raw)

    async def set(self, key: str, value: Any, ttl: float | None) -> None:
        await self._connect().set(key, json.dumps(value), px=int(ttl * 1000) if ttl else None)

    async def delete(self, key: str) -> bool:
        return bool(await self._connect().delete(key))

    async def acquire(self, key: str, ttl: float) -> int | None:
        client = self._connect()
        token = int(await client.incr(f"{key}:fence"))
        if await client.set(key, str(token), nx=True, px=max(1, int(ttl * 1000))):
            return token
        return None

    async def release(self, key: str, token: int) -> bool:
        return bool(await self._connect().eval(_RELEASE, 1, key, str(token)))

    async def ping(self) -> None:
        await self._connect().ping()

    async def close(self) -> None:
        for client in (self._client, getattr(self, "_retired", None)):
            if client is not None:
                await client.aclose()
        self._client = None
