"""The invoke client: ``POST /invoke/{module}/{entity}/{action}`` to the app process.

:class:`Client` is the server's ``sidecars.Invoker``. Each invoke opens a scope (``scopes``) on
the action's transaction, sends its ids and the ``/ctx`` URL in headers, and waits at most the
action's ``impl.timeout`` or ``--invoke-timeout``. What comes back becomes what the server knows:

    200 {data, new_state, events}    a ``sidecars.Reply``; a malformed one is a 500 (bad reply)
    500 {error} (or any other status) a 500 problem ``SVC.SIDECAR.HANDLER_FAILED`` with the error
    no answer in time                a 504 problem ``SVC.SIDECAR.TIMEOUT``
    nobody listening                 a 503 problem ``SVC.SIDECAR.UNREACHABLE`` (Retry-After)

Every failure raises, so ``actions.run`` rolls back the action and every ``/ctx`` write that
joined its scope. The scope is closed before the answer is used: a late ``/ctx`` call of a finished
invoke is refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp

from dap import tracing
from dap.bridge import scopes, wire
from dap.server import errors
from dap.server.workflows import sidecars

FAILED = "SVC.SIDECAR.HANDLER_FAILED"
TIMEOUT = "SVC.SIDECAR.TIMEOUT"
UNREACHABLE = "SVC.SIDECAR.UNREACHABLE"


def connector(endpoint: wire.Endpoint) -> aiohttp.BaseConnector:
    """Keep-alive connections to the app: over its unix socket, or TCP."""
    if endpoint.socket is not None:
        return aiohttp.UnixConnector(path=endpoint.socket, limit=100)
    return aiohttp.TCPConnector(limit=100)


class Client:
    """Invokes actions in the app process (the ``sidecars.Invoker`` of a bridged server)."""

    def __init__(
        self,
        endpoint: wire.Endpoint,
        *,
        timeout: float,
        scopes_: scopes.Scopes,
        ctx_url: Callable[[], str],
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.scopes = scopes_
        self._ctx_url = ctx_url
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=connector(self.endpoint), json_serialize=_dumps, raise_for_status=False
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def invoke(self, call: sidecars.Invocation) -> sidecars.Reply:
        seconds = call.timeout or self.timeout
        scope = self.scopes.open(
            call.conn,
            tenant=call.tenant,
            principal=call.principal,
            username=call.username,
            entity=call.entity,
            action=call.action,
            timeout=seconds,
            begin=call.begin,
        )
        body = {
            "resource_id": str(call.record_id) if call.record_id else None,
            "resource": call.resource,
            "params": call.params,
        }
        headers = {wire.SCOPE: scope.id, wire.INVOKE: scope.invoke_id, wire.CTX_URL: self._ctx_url()}
        if call.idempotency_key is not None:  # a saga's step: the app applies one key once
            headers["Idempotency-Key"] = call.idempotency_key
        url = self.endpoint.base + wire.invoke_path(call.entity, call.action)
        attributes = {"dap.tenant": str(call.tenant), "enduser.id": call.principal, "dap.entity": call.entity}
        try:
            # the app process gets the invoke span's traceparent: its spans, and the /ctx calls it
            # sends back with that header, join the request's trace
            with tracing.span(f"invoke {call.entity}/{call.action}", kind="client", attributes=attributes):
                tracing.inject(headers)
                async with asyncio.timeout(seconds):
                    async with self.session.post(url, json=body, headers=headers) as resp:
                        status, raw = resp.status, await resp.read()
        except TimeoutError as exc:
            raise errors.GatewayTimeout(
                f"the app process gave no answer to {call.entity}/{call.action} within {seconds:g} s "
                "(--invoke-timeout or the action's impl.timeout); nothing was changed",
                code=TIMEOUT,
            ) from exc
        except aiohttp.ClientError as exc:
            raise errors.ServiceUnavailable(
                f"the app process at {self.endpoint.shown} cannot be reached ({exc.__class__.__name__}); "
                "nothing was changed: start it, or check --sidecar-endpoint",
                retry_after=1,
                code=UNREACHABLE,
            ) from exc
        finally:
            await self.scopes.close(scope)
        return answer(call, status, raw)


def answer(call: sidecars.Invocation, status: int, raw: bytes) -> sidecars.Reply:
    """The reply of a finished invoke; a problem for anything but a well-formed 200."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if status != 200:
        error = wire.error_of(body, f"the app answered HTTP {status}")
        raise errors.InternalError(
            f"{call.entity}/{call.action} failed in the app process: {error}; nothing was changed",
            code=FAILED,
        )
    try:
        return wire.parse_reply(body)
    except wire.BadReplyError as exc:
        raise errors.InternalError(
            f"the app's answer to {call.entity}/{call.action} is not {{data, new_state, events}}: {exc}; "
            "nothing was changed",
            code=sidecars.BAD_REPLY,
        ) from exc


def _dumps(value: object) -> str:
    return json.dumps(value, default=str)
