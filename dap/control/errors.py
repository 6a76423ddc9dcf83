"""The one error tree of dap.control.

Every failure the control plane reports is a ``ControlError``; the HTTP layer turns it into an
RFC 9457 problem document from its ``status``, ``code`` and ``errors``, so handlers never build
error responses by hand. Library errors (asyncpg, aiohttp client, PyNaCl) are translated at the
boundary with ``raise ... from exc``::

    ControlError                        500  SVC.CONTROL.INTERNAL
    ├── RequestError                    400  SVC.REQUEST.MALFORMED
    │   ├── ArtifactInvalidError        422  SVC.ARTIFACT.INVALID      (manifest validation)
    │   ├── EvidenceInvalidError        422  SVC.EVIDENCE.INVALID
    │   └── PayloadTooLargeError        413  SVC.ARTIFACT.TOO_LARGE
    ├── NotFoundError                   404  SVC.CONTROL.NOT_FOUND
    │   └── RevokedError                410  SVC.ARTIFACT.REVOKED
    ├── SignatureError                  422  SVC.SIGNATURE.INVALID     (envelope or snapshot)
    ├── SigningKeyError                 500  SVC.KEY.INVALID           (missing or unreadable key)
    ├── NoCandidateError                409  SVC.ROUTING.NO_CANDIDATE  (recorded on the binding)
    ├── AppAmbiguousError               409  SVC.ARTIFACT.APP_AMBIGUOUS (bound to several apps, none named)
    ├── LogInconsistentError            409  SVC.LOG.INCONSISTENT      (a forked or rewritten log)
    ├── PolicyRefusedError              422  SVC.POLICY.REFUSED        (approvals short of the threshold)
    ├── StoreUnavailableError           503  SVC.STORE.UNAVAILABLE
    └── UpstreamError                   502  SVC.UPSTREAM.UNAVAILABLE  (region unreachable)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorItem:
    """One entry of a problem document's ``errors`` list.

    ``file`` and ``document`` are set for manifest problems (which file, which YAML document).
    """

    path: str
    message: str
    file: str | None = None
    document: int | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"path": self.path, "message": self.message}
        if self.file is not None:
            out["file"] = self.file
        if self.document is not None:
            out["document"] = self.document
        return out


class ControlError(Exception):
    status = 500
    code = "SVC.CONTROL.INTERNAL"
    title = "Internal control-plane error"

    def __init__(self, detail: str, errors: list[ErrorItem] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors: list[ErrorItem] = list(errors or [])


class RequestError(ControlError):
    status = 400
    code = "SVC.REQUEST.MALFORMED"
    title = "Malformed request"


class ArtifactInvalidError(RequestError):
    status = 422
    code = "SVC.ARTIFACT.INVALID"
    title = "Artifact validation failed"


class EvidenceInvalidError(RequestError):
    status = 422
    code = "SVC.EVIDENCE.INVALID"
    title = "Evidence validation failed"


class PayloadTooLargeError(RequestError):
    status = 413
    code = "SVC.ARTIFACT.TOO_LARGE"
    title = "Payload too large"


class NotFoundError(ControlError):
    status = 404
    code = "SVC.CONTROL.NOT_FOUND"
    title = "Not found"


class RevokedError(NotFoundError):
    status = 410
    code = "SVC.ARTIFACT.REVOKED"
    title = "Artifact revoked"


class SignatureError(ControlError):
    status = 422
    code = "SVC.SIGNATURE.INVALID"
    title = "Signature or hash verification failed"


class SigningKeyError(ControlError):
    code = "SVC.KEY.INVALID"
    title = "Signing key unavailable"


class NoCandidateError(ControlError):
    status = 409
    code = "SVC.ROUTING.NO_CANDIDATE"
    title = "No cluster can host the workspace"


class AppAmbiguousError(ControlError):
    status = 409
    code = "SVC.ARTIFACT.APP_AMBIGUOUS"
    title = "The workspaces are bound to different apps"


class LogInconsistentError(ControlError):
    status = 409
    code = "SVC.LOG.INCONSISTENT"
    title = "Transparency log inconsistent"


class PolicyRefusedError(ControlError):
    status = 422
    code = "SVC.POLICY.REFUSED"
    title = "Refused by the app's signing policy"


class StoreUnavailableError(ControlError):
    status = 503
    code = "SVC.STORE.UNAVAILABLE"
    title = "Control-plane store unavailable"


class UpstreamError(ControlError):
    status = 502
    code = "SVC.UPSTREAM.UNAVAILABLE"
    title = "Region control unreachable"
