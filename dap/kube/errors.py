"""The transport's error tree, raised at the client boundary with ``raise … from``.

::

    KubeError                  anything the transport raises
    ├── ApiError               the API server answered with an error status (.status)
    │   ├── NotFoundError      404: the object (or its kind) does not exist
    │   ├── ConflictError      409: already exists, or a stale resourceVersion
    │   └── InvalidObjectError 400/422: the API server refused the body it was sent
    └── ApiUnavailableError    no answer at all (connection refused, reset, timed out)
"""

from __future__ import annotations


class KubeError(Exception):
    """Base of every error the Kubernetes transport raises."""


class ApiError(KubeError):
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


class ApiUnavailableError(KubeError):
    pass


_BY_STATUS: dict[int, type[ApiError]] = {
    404: NotFoundError,
    409: ConflictError,
    400: InvalidObjectError,
    422: InvalidObjectError,
}


def for_status(status: int, message: str, *, method: str, path: str) -> ApiError:
    """The error class matching an HTTP status of the Kubernetes API."""
    return _BY_STATUS.get(status, ApiError)(status, message, method=method, path=path)
