"""One client per protocol speaking the same verbs over the spec of ``protocols_spec``: REST, gRPC
and the websocket's call frames.

Each answers ``(code, values)`` where ``code`` is ``"ok"`` or the ``SVC.*`` code of the failure (the
problem document's ``code`` over REST, the ``google.rpc.ErrorInfo`` reason over gRPC, the error
frame's code over the websocket).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor_pool import DescriptorPool

from dap.server.rpc import status

from .conftest import Running
from .protocols_spec import PACKAGE, Outcome


class Ws:
    """The request/response frames of the ``/{ws}/_ws`` socket, one socket per call (its caller)."""

    name = "ws"

    def __init__(self, srv: Running) -> None:
        self.srv = srv
        self.n = 0

    async def _call(self, who: str | None, **frame: Any) -> Outcome:
        url = f"{self.srv.api}/default/_ws"
        headers = {"Authorization": who} if who is not None else {}
        try:
            ws = await self.srv.http.ws_connect(url, headers=headers)
        except aiohttp.WSServerHandshakeError:
            async with self.srv.http.get(url, headers=headers) as resp:  # the refusal's problem
                return (await resp.json())["code"], None
        async with ws:
            self.n += 1
            cid = f"c{self.n}"
            await ws.send_json({"type": "call", "id": cid, **frame})
            async for msg in ws:
                answer = json.loads(msg.data)
                if answer.get("id") != cid:
                    continue  # welcome
                if answer["type"] == "error":
                    return answer["code"], None
                return "ok", answer
        raise AssertionError("the socket closed without an answer")

    async def create(
        self,
        entity: str,
        body: dict[str, Any],
        who: str | None,
        *,
        key: str | None = None,
        submit: bool = False,
    ) -> Outcome:
        extra = {"idempotency_key": key} if key else {}
        code, answer = await self._call(
            who, entity=f"sales/{entity}", verb="create", body=body, submit=submit, **extra
        )
        return code, answer["data"] if answer else None

    async def find(self, entity: str, record_id: str, who: str | None) -> Outcome:
        code, answer = await self._call(who, entity=f"sales/{entity}", verb="find", record=record_id)
        return code, answer["data"] if answer else None

    async def list(self, entity: str, query: str, who: str | None) -> Outcome:
        rows: list[dict[str, Any]] = []
        offset = 0
        while True:
            code, answer = await self._call(
                who, entity=f"sales/{entity}", verb="list", query=f"{query}&offset={offset}"
            )
            if answer is None:
                return code, None
            rows += answer["data"]
            if len(answer["data"]) < answer["limit"]:
                return "ok", rows
            offset += answer["limit"]

    async def update(
        self,
        entity: str,
        record_id: str,
        body: dict[str, Any],
        who: str | None,
        *,
        version: int | None = None,
    ) -> Outcome:
        extra = {"version": version} if version is not None else {}
        code, answer = await self._call(
            who, entity=f"sales/{entity}", verb="update", record=record_id, body=body, **extra
        )
        return code, answer["data"] if answer else None

    async def delete(self, entity: str, record_id: str, who: str | None) -> Outcome:
        code, answer = await self._call(who, entity=f"sales/{entity}", verb="delete", record=record_id)
        return code, answer["data"] if answer else None

    async def act(self, entity: str, record_id: str, action: str, who: str | None) -> Outcome:
        code, answer = await self._call(who, entity=f"sales/{entity}", verb=action, record=record_id)
        return code, answer["data"] if answer else None

    async def action(
        self,
        entity: str,
        record_id: str,
        action: str,
        who: str | None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Outcome:
        extra = {"idempotency_key": key} if key else {}
        code, answer = await self._call(
            who, entity=f"sales/{entity}", verb=action, record=record_id, body=params or {}, **extra
        )
        return code, _acted(answer, "location" in answer if answer else False)

    async def service(
        self,
        action: str,
        who: str | None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
        callback: str | None = None,
    ) -> Outcome:
        extra = {"idempotency_key": key} if key else {}
        if callback:
            extra["callback_url"] = callback
        code, answer = await self._call(who, service="sales/tools", verb=action, body=params or {}, **extra)
        return code, _acted(answer, "location" in answer if answer else False)

    async def job(self, target: str, job_id: str, who: str | None) -> Outcome:
        kind = "service" if target == "tools" else "entity"
        code, answer = await self._call(who, **{kind: f"sales/{target}"}, verb="_job", job=job_id)
        return code, answer["data"] if answer else None


def _acted(answer: Any, job: bool) -> Any:
    """An action's answer, alike for every protocol: ``{"job"}`` for a queued job, else its record
    (``data``, entities only) and ``result``."""
    if answer is None:
        return None
    if job:
        return {"job": answer["data"]}
    return {"data": answer.get("data"), "result": answer.get("result")}


class Rest:
    name = "rest"

    def __init__(self, srv: Running) -> None:
        self.srv = srv

    async def _call(
        self, method: str, path: str, who: str | None, body: Any = None, headers: Mapping[str, str] = {}
    ) -> tuple[int, Any, Mapping[str, str]]:
        url = f"{self.srv.api}/default/api/sales/{path}"
        sent = {"Content-Type": "application/json", **headers}
        if who is not None:
            sent["Authorization"] = who
        data = json.dumps(body).encode() if body is not None else None
        async with self.srv.http.request(method, url, data=data, headers=sent) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else None, resp.headers

    @staticmethod
    def _outcome(status: int, answer: Any) -> Outcome:
        if status >= 400:
            return answer["code"], None
        return "ok", answer["data"] if answer is not None else None

    async def create(
        self,
        entity: str,
        body: dict[str, Any],
        who: str | None,
        *,
        key: str | None = None,
        submit: bool = False,
    ) -> Outcome:
        headers = {"Idempotency-Key": key} if key else {}
        path = entity + ("?submit=true" if submit else "")
        status, answer, _ = await self._call("POST", path, who, body, headers)
        return self._outcome(status, answer)

    async def find(self, entity: str, record_id: str, who: str | None) -> Outcome:
        status, answer, _ = await self._call("GET", f"{entity}/{record_id}", who)
        return self._outcome(status, answer)

    async def list(self, entity: str, query: str, who: str | None) -> Outcome:
        """Every page, as gRPC's List streams them: offsets walked until a short page."""
        rows: list[dict[str, Any]] = []
        offset = 0
        while True:
            status, answer, _ = await self._call("GET", f"{entity}?{query}&offset={offset}", who)
            if status >= 400:
                return self._outcome(status, answer)
            rows += answer["data"]
            if len(answer["data"]) < answer["limit"]:
                return "ok", rows
            offset += answer["limit"]

    async def update(
        self,
        entity: str,
        record_id: str,
        body: dict[str, Any],
        who: str | None,
        *,
        version: int | None = None,
    ) -> Outcome:
        headers = {"If-Match": f'"{version}"'} if version is not None else {}
        status, answer, _ = await self._call("PATCH", f"{entity}/{record_id}", who, body, headers)
        return self._outcome(status, answer)

    async def delete(self, entity: str, record_id: str, who: str | None) -> Outcome:
        status, answer, _ = await self._call("DELETE", f"{entity}/{record_id}", who)
        return self._outcome(status, answer)

    async def act(self, entity: str, record_id: str, action: str, who: str | None) -> Outcome:
        status, answer, _ = await self._call("POST", f"{entity}/{record_id}/{action}", who)
        return self._outcome(status, answer)

    async def action(
        self,
        entity: str,
        record_id: str,
        action: str,
        who: str | None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Outcome:
        headers = {"Idempotency-Key": key} if key else {}
        status, answer, sent = await self._call(
            "POST", f"{entity}/{record_id}/{action}", who, params or {}, headers
        )
        if status >= 400:
            return answer["code"], None
        return "ok", _acted(answer, status == 202 and "Location" in sent)  # a job, not an approval

    async def service(
        self,
        action: str,
        who: str | None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
        callback: str | None = None,
    ) -> Outcome:
        headers = {"Idempotency-Key": key} if key else {}
        if callback:
            headers["X-Reply-To"] = callback
        status, answer, sent = await self._call("POST", f"tools/{action}", who, params or {}, headers)
        if status >= 400:
            return answer["code"], None
        return "ok", _acted(answer, status == 202 and "Location" in sent)

    async def job(self, target: str, job_id: str, who: str | None) -> Outcome:
        status, answer, _ = await self._call("GET", f"{target}/_jobs/{job_id}", who)
        return self._outcome(status, answer)


def camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_"))


class Grpc:
    name = "grpc"

    def __init__(self, channel: grpc.aio.Channel, pool: DescriptorPool, package: str = PACKAGE) -> None:
        self.channel, self.pool, self.package = channel, pool, package

    def cls(self, name: str) -> Any:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(name))

    def _method(self, entity: str, verb: str, streaming: bool = False) -> Any:
        e = camel(entity)
        service = self.pool.FindServiceByName(f"{self.package}.{e}Service")
        method = service.methods_by_name[verb]
        response = message_factory.GetMessageClass(method.output_type)
        path = f"/{service.full_name}/{verb}"
        make = self.channel.unary_stream if streaming else self.channel.unary_unary
        return make(
            path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )

    def request(self, entity: str, verb: str, **fields: Any) -> Any:
        return self.cls(f"{self.package}.{verb}{camel(entity)}Request")(**fields)

    def record(self, entity: str, body: Mapping[str, Any]) -> Any:
        """The record message of ``body``; a name the message lacks is left out (an update still
        names it in its ``update_mask``, as a client with an older schema would)."""
        return json_format.ParseDict(
            dict(body), self.cls(f"{self.package}.{camel(entity)}")(), ignore_unknown_fields=True
        )

    @staticmethod
    def metadata(who: str | None, **extra: str) -> list[tuple[str, str]]:
        md = [("dap-workspace", "default"), *extra.items()]
        return md + ([("authorization", who)] if who is not None else [])

    @staticmethod
    def data(msg: Any) -> dict[str, Any]:
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    async def _unary(self, entity: str, verb: str, request: Any, md: list[tuple[str, str]]) -> Outcome:
        try:
            answer = await self._method(entity, verb)(request, metadata=md)
        except grpc.aio.AioRpcError as exc:
            return status.reason(exc.trailing_metadata()) or exc.code().name, None
        return "ok", self.data(answer)

    async def create(
        self,
        entity: str,
        body: dict[str, Any],
        who: str | None,
        *,
        key: str | None = None,
        submit: bool = False,
    ) -> Outcome:
        request = self.request(entity, "Create", record=self.record(entity, body), submit=submit)
        extra = {"idempotency-key": key} if key else {}
        return await self._unary(entity, "Create", request, self.metadata(who, **extra))

    async def find(self, entity: str, record_id: str, who: str | None) -> Outcome:
        return await self._unary(entity, "Get", self.request(entity, "Get", id=record_id), self.metadata(who))

    async def list(self, entity: str, query: str, who: str | None) -> Outcome:
        request = self.request(entity, "List", query=query)
        rows: list[dict[str, Any]] = []
        try:
            async for page in self._method(entity, "List", streaming=True)(
                request, metadata=self.metadata(who)
            ):
                rows += [self.data(r) for r in page.data]
        except grpc.aio.AioRpcError as exc:
            return status.reason(exc.trailing_metadata()) or exc.code().name, None
        return "ok", rows

    async def update(
        self,
        entity: str,
        record_id: str,
        body: dict[str, Any],
        who: str | None,
        *,
        version: int | None = None,
    ) -> Outcome:
        request = self.request(entity, "Update", id=record_id, record=self.record(entity, body))
        request.update_mask.paths.extend(body)
        if version is not None:
            request.version = version
        return await self._unary(entity, "Update", request, self.metadata(who))

    async def delete(self, entity: str, record_id: str, who: str | None) -> Outcome:
        return await self._unary(
            entity, "Delete", self.request(entity, "Delete", id=record_id), self.metadata(who)
        )

    async def act(self, entity: str, record_id: str, action: str, who: str | None) -> Outcome:
        method = camel(action)
        request = self.request(entity, method, id=record_id)
        code, data = await self._unary(entity, method, request, self.metadata(who))
        return code, data["data"] if data is not None else None

    async def action(
        self,
        entity: str,
        record_id: str,
        action: str,
        who: str | None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Outcome:
        method = camel(action)
        request = self.request(entity, method, id=record_id)
        request.params.update(params or {})
        extra = {"idempotency-key": key} if key else {}
        return await self._acted(entity, method, request, self.metadata(who, **extra))

    async def service(
        self,
        action: str,
        who: str | None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
        callback: str | None = None,
    ) -> Outcome:
        method = camel(action)
        request = self.request("tools", method)
        request.params.update(params or {})
        extra = {"idempotency-key": key} if key else {}
        if callback:
            extra["x-reply-to"] = callback  # the action's callback.header, lower-cased
        return await self._acted("tools", method, request, self.metadata(who, **extra))

    async def _acted(self, target: str, method: str, request: Any, md: list[tuple[str, str]]) -> Outcome:
        try:
            answer = await self._method(target, method)(request, metadata=md)
        except grpc.aio.AioRpcError as exc:
            return status.reason(exc.trailing_metadata()) or exc.code().name, None
        data = integral(self.data(answer))
        if answer.DESCRIPTOR.full_name == "dap.jobs.v1.Job":
            return "ok", {"job": data}
        return "ok", {"data": data.get("data"), "result": data.get("result")}

    async def job(self, target: str, job_id: str, who: str | None) -> Outcome:
        request = self.cls("dap.jobs.v1.GetJobRequest")(id=job_id)
        code, data = await self._unary(target, "GetJob", request, self.metadata(who))
        return code, integral(data)


def integral(value: Any) -> Any:
    """JSON as REST writes it: a ``google.protobuf.Value`` number is a double (2 reads 2.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [integral(v) for v in value]
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    return value
