"""The operator's one error tree.

::

    OperatorError                  anything the operator raises on purpose
    ├── ApiError                   the Kubernetes API answered with an error status (.status)
    │   ├── NotFoundError          404: the object (or its kind) does not exist
    │   ├── ConflictError          409: already exists, or a stale resourceVersion
    │   └── InvalidObjectError     400/422: the API server refused a body we built
    ├── ApiUnavailableError        no answer at all (connection refused, timeout)
    └── InvalidSpecError           a custom resource that cannot be reconciled as written

aiohttp's exceptions are translated at the client boundary (``kube.py``) with ``raise … from``.
Handlers map the tree onto kopf's retry semantics on purpose: ``InvalidSpecError`` and
``InvalidObjectError`` become ``kopf.PermanentError`` (retrying cannot help until the object is
edited, and the edit triggers a new run); every other error becomes
``kopf.TemporaryError(delay=…)`` (the API server or a dependency will come back).
"""

from __future__ import annotations


class OperatorError(Exception):
    """Base of every error the operator raises on purpose."""


class ApiError(OperatorError):
    def __init__(self, status: int, message: str, *, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path}: {status} {message}".strip())
        self.status = status
        self.method = method
        self.path = path


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    pass


class InvalidObjectError(ApiError):
    pass


class ApiUnavailableError(OperatorError):
    pass


class InvalidSpecError(OperatorError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def for_status(status: int, message: str, *, method: str, path: str) -> ApiError:
    """The error class matching an HTTP status of the Kubernetes API."""
    cls: type[ApiError] = ApiError
    if status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    elif status in (400, 422):
        cls = InvalidObjectError
    return cls(status, message, method=method, path=path)
