"""Registration of an artifact (``POST /v1/artifacts``): validate, hash, sign, store, bind.

The rule of the spec, with the deployments update the reference behaviour forgot:

1. validate the manifests (dap.config); on failure nothing is stored;
2. hash every file and the aggregate (``dap.config.canonical``);
3. under a per-app advisory lock: when the app's newest artifact is active and has the same
   aggregate, reuse it (idempotent re-registration, no new version); otherwise check the app's
   signing policy (``supply.policies``: fewer valid approvals than its threshold is refused, nothing
   stored), then build and sign the next version, chained to the newest one by
   ``prev_version``/``prev_sha256``, with the valid approvals embedded;
4. bind workspaces (from the request and from the artifact's Workspace manifests) to the app,
   point every binding of the app at this artifact, route each to a cluster (``registry.place``);
   an upload whose app is only a default (``dap register`` without ``--app``) keeps the app its
   workspaces are already bound to, so versions chain and revoke falls back within that app;
   moving a workspace to another app takes an explicitly named app (``choose_app``);
5. append the registration (envelope hash) to the transparency log and sign the new tree head
   (``supply.transparency``);
6. bump the snapshot version when an artifact was created or a binding changed.

Steps 3-6 are one transaction: a crash leaves either everything or nothing. CPU-heavy work
(validation, hashing, canonical JSON and signing) runs in a worker thread so the event loop keeps
answering snapshot polls meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from dap.config import approvals, canonical
from dap.control import errors, ids
from dap.control.artifacts import validation
from dap.control.clusters import registry, routing
from dap.control.ids import AppName, ArtifactId, ClusterId, WorkspaceId
from dap.control.storage import store
from dap.control.supply import policies, transparency
from dap.control.trust import envelopes, signing, snapshots


@dataclass(frozen=True)
class Limits:
    max_file_bytes: int = 8 * 1024 * 1024
    max_total_bytes: int = 64 * 1024 * 1024
    max_files: int = 10_000


@dataclass(frozen=True)
class Upload:
    app: AppName
    files: Mapping[str, bytes]
    workspaces: tuple[WorkspaceId, ...] = ()
    # False: ``app`` is a default (the directory's name) that yields to the app the workspaces
    # are bound to; True: the author named the app, and bound workspaces move to it.
    app_explicit: bool = True
    approvals: tuple[dict[str, str], ...] = ()  # authors' approvals (dap.config.approvals)


@dataclass(frozen=True)
class Binding:
    workspace_id: WorkspaceId
    cluster_id: ClusterId | None
    error: str | None


@dataclass(frozen=True)
class Result:
    app: AppName
    artifact_id: ArtifactId
    version: int
    sha256: str
    created: bool
    snapshot_version: int | None
    bindings: tuple[Binding, ...]
    hash_seconds: float = 0.0
    sign_seconds: float = 0.0
    kept_app_for: tuple[WorkspaceId, ...] = ()  # bound workspaces whose app replaced the default

    def as_json(self) -> dict[str, object]:
        return {
            "app": self.app,
            "app_kept_for": list(self.kept_app_for),
            "artifact_id": self.artifact_id,
            "version": self.version,
            "sha256": self.sha256,
            "created": self.created,
            "snapshot_version": self.snapshot_version,
            "deployments": [
                {"workspace_id": b.workspace_id, "cluster_id": b.cluster_id, "error": b.error}
                for b in self.bindings
            ],
        }


def check_workspace_id(raw: str) -> WorkspaceId:
    if not ids.is_workspace_id(raw):
        raise errors.RequestError(
            f"invalid workspace id {raw!r}",
            [errors.ErrorItem("workspaces", "a workspace id is a DNS label: [a-z0-9-], at most 63")],
        )
    return WorkspaceId(raw)


def _hash(files: Mapping[str, bytes]) -> tuple[dict[str, str], str, float]:
    started = time.perf_counter()
    hashes = {path: canonical.file_sha256(content) for path, content in files.items()}
    return hashes, canonical.aggregate_sha256(hashes), time.perf_counter() - started


def _sign(
    upload: Upload,
    hashes: Mapping[str, str],
    sha256: str,
    version: int,
    previous: store.ArtifactRow | None,
    created_at: datetime,
    signer: signing.Signer,
    approved: list[dict[str, str]],
) -> tuple[envelopes.Envelope, bytes, float]:
    started = time.perf_counter()
    envelope = envelopes.build(
        app=upload.app,
        version=version,
        files=upload.files,
        file_hashes=hashes,
        sha256=sha256,
        prev_version=previous.version if previous else None,
        prev_sha256=previous.sha256 if previous else None,
        created_at=snapshots.timestamp(created_at),
        signer=signer,
        approvals=approved,
    )
    body = signing.canonical_json(envelope)
    return envelope, body, time.perf_counter() - started


RETRIES = 3


async def register(
    pool: store.Pool, upload: Upload, *, signer: signing.Signer, standalone: bool, now: datetime | None = None
) -> Result:
    placements = await asyncio.to_thread(validation.validate, upload.files)
    hashes, sha256, hash_seconds = await asyncio.to_thread(_hash, upload.files)
    created_at = (now or datetime.now(UTC)).replace(microsecond=0)
    for attempt in range(1, RETRIES + 1):
        try:
            return await _store(
                pool,
                upload,
                placements=placements,
                hashes=hashes,
                sha256=sha256,
                hash_seconds=hash_seconds,
                created_at=created_at,
                signer=signer,
                standalone=standalone,
            )
        except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
            # Two registrations binding the same workspaces at once: the loser retries.
            if attempt == RETRIES:
                raise errors.StoreUnavailableError("registration kept conflicting; retry") from exc
    raise AssertionError("unreachable")


async def _store(
    pool: store.Pool,
    upload: Upload,
    *,
    placements: list[routing.Placement],
    hashes: dict[str, str],
    sha256: str,
    hash_seconds: float,
    created_at: datetime,
    signer: signing.Signer,
    standalone: bool,
) -> Result:
    sign_seconds = 0.0
    async with pool.acquire() as conn, conn.transaction():
        upload, kept_for = choose_app(upload, placements, await store.deployments(conn))
        await store.lock_app(conn, upload.app)
        latest = await store.latest_artifact(conn, upload.app)
        if latest is not None and latest.sha256 == sha256 and latest.status == "active":
            artifact_id, version, created = latest.artifact_id, latest.version, False
        else:
            approved = check_policy(await policies.get(conn, upload.app), upload, sha256)
            version = latest.version + 1 if latest else 1
            envelope, body, sign_seconds = await asyncio.to_thread(
                _sign, upload, hashes, sha256, version, latest, created_at, signer, approved
            )
            artifact_id, created = ArtifactId(envelope["artifact_id"]), True
            await store.insert_artifact(
                conn,
                artifact_id=artifact_id,
                app=upload.app,
                version=version,
                sha256=sha256,
                signing_key_id=signer.key_id,
                envelope=body,
                files=[(p, hashes[p], len(c)) for p, c in upload.files.items()],
                created_at=created_at,
            )
            await transparency.append(
                conn,
                [
                    transparency.registration_entry(
                        app=upload.app,
                        version=version,
                        artifact_id=artifact_id,
                        sha256=sha256,
                        envelope=body,
                        key_id=signer.key_id,
                        at=created_at,
                    )
                ],
                signer=signer,
            )
        bindings = _bindings(upload, placements, await store.deployments(conn), artifact_id)
        changed = await registry.place(conn, bindings, standalone=standalone)
        snapshot_version = await store.bump_snapshot(conn) if created or changed else None
        placed = {d.workspace_id: d for d in await store.deployments(conn, app=upload.app)}
    return Result(
        app=upload.app,
        artifact_id=artifact_id,
        version=version,
        sha256=sha256,
        created=created,
        snapshot_version=snapshot_version,
        bindings=tuple(Binding(ws, d.cluster_id, d.error) for ws, d in sorted(placed.items())),
        hash_seconds=hash_seconds,
        sign_seconds=sign_seconds,
        kept_app_for=kept_for,
    )


def check_policy(policy: policies.Policy | None, upload: Upload, sha256: str) -> list[dict[str, str]]:
    """The valid approvals to embed; ``PolicyRefusedError`` when fewer than the threshold."""
    if policy is None:
        return []
    keys = {str(k): v for k, v in policy.keys.items()}
    valid = approvals.approved_by(list(upload.approvals), keys, upload.app, sha256)
    if len(valid) < policy.threshold:
        raise errors.PolicyRefusedError(
            f"app {upload.app} needs {policy.threshold} approval(s) by its policy keys "
            f"({', '.join(sorted(policy.keys))}); {len(valid)} valid of {len(upload.approvals)} given",
            [errors.ErrorItem("approvals", f"at least {policy.threshold} valid approvals of the content")],
        )
    return valid


def choose_app(
    upload: Upload, placements: list[routing.Placement], existing: list[store.DeploymentRow]
) -> tuple[Upload, tuple[WorkspaceId, ...]]:
    """The upload with the app it registers as, and the bound workspaces that decided it.

    An explicit app is kept as given. A default app yields to the one app that the workspaces of
    this registration (request and Workspace manifests) are already bound to; a default that
    would have to pick between several apps is refused, since guessing would move a workspace.
    """
    if upload.app_explicit:
        return upload, ()
    wanted = set(upload.workspaces) | {p.workspace_id for p in placements}
    # A management Workspace's binding without a registration yet (app KUBE_APP, empty) is unbound.
    bound = {d.workspace_id: d.app for d in existing if d.workspace_id in wanted and d.app}
    apps = sorted(set(bound.values()))
    if not apps:
        return upload, ()
    if len(apps) > 1:
        listed = ", ".join(f"{ws} (app {app!r})" for ws, app in sorted(bound.items()))
        raise errors.AppAmbiguousError(
            f"the workspaces are bound to different apps: {listed}; name the app with --app "
            "(the workspaces not bound to it move to it)",
            [errors.ErrorItem("app", "required when the workspaces are bound to different apps")],
        )
    return dataclasses.replace(upload, app=AppName(apps[0]), app_explicit=True), tuple(sorted(bound))


def _bindings(
    upload: Upload,
    placements: list[routing.Placement],
    existing: list[store.DeploymentRow],
    artifact_id: ArtifactId,
) -> list[store.DeploymentRow]:
    """Every binding this registration touches, pointed at ``artifact_id``.

    A Workspace manifest in the artifact sets the placement; a workspace named only in the
    request keeps the placement it had (or asks for none); every other binding of the app just
    moves to the new artifact.
    """
    current = {d.workspace_id: d for d in existing}
    wanted: dict[WorkspaceId, routing.Placement | None] = {p.workspace_id: p for p in placements}
    for ws in upload.workspaces:
        wanted.setdefault(ws, None)
    out: list[store.DeploymentRow] = []
    for ws, placement in sorted(wanted.items()):
        old = current.get(ws)
        row = old or store.DeploymentRow(ws, upload.app, None, None, None, None, None, None)
        if placement is not None:
            row = dataclasses.replace(
                row,
                cluster_class=placement.cluster_class,
                region=placement.region,
                requested_cluster=placement.cluster,
            )
        out.append(dataclasses.replace(row, app=upload.app, artifact_id=artifact_id))
    out.extend(
        dataclasses.replace(d, artifact_id=artifact_id)
        for d in existing
        if d.app == upload.app and d.workspace_id not in wanted
    )
    return out
