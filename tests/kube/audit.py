"""The API server's audit log, read as the record of what the operator asked of it.

On kmock's emulator the tests counted requests in the emulator's own log. On the real server the
audit log is that record: the control plane writes one line per ServiceAccount request (see
``controlplane.AUDIT_POLICY``), naming the user, the verb, the URI and the answer's status.
``Audit.mark()`` remembers where the log ends; the other methods look at what came after it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

OPERATOR_USER = "system:serviceaccount:dap-system:dap-operator"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclasses.dataclass(frozen=True)
class Call:
    verb: str
    uri: str
    code: int
    user: str
    body: str = ""  # the request body of a write, as JSON

    def __str__(self) -> str:
        return f"{self.verb} {self.uri} -> {self.code} {self.body[:600]}".rstrip()


class Audit:
    def __init__(self, path: Path, user: str = OPERATOR_USER) -> None:
        self.path = path
        self.user = user

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def calls(self, start: int = 0) -> list[Call]:
        """The user's completed requests since ``start`` (a watch counts once, when it opens)."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            handle.seek(start)
            data = handle.read()
        data = data[: data.rfind(b"\n") + 1]  # a line being written is left for later
        calls = []
        for line in data.splitlines():
            event: dict[str, Any] = json.loads(line)
            if event.get("user", {}).get("username") != self.user:
                continue
            watch = event.get("verb") == "watch"
            stage = event.get("stage")
            if (watch and stage != "ResponseStarted") or (not watch and stage != "ResponseComplete"):
                continue
            code = int(event.get("responseStatus", {}).get("code", 0))
            body = json.dumps(event["requestObject"], sort_keys=True) if "requestObject" in event else ""
            calls.append(Call(str(event.get("verb")), str(event.get("requestURI")), code, self.user, body))
        return calls

    def writes(self, start: int = 0) -> list[Call]:
        return [c for c in self.calls(start) if c.verb in WRITE_VERBS]

    def forbidden(self, start: int = 0) -> list[Call]:
        return [c for c in self.calls(start) if c.code == 403]


def summary(calls: list[Call]) -> str:
    return "\n".join(str(c) for c in calls[:30]) + (f"\n… {len(calls) - 30} more" if len(calls) > 30 else "")


__all__ = ["OPERATOR_USER", "Audit", "Call", "summary"]
