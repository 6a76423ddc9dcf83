"""``dap dev`` loads the spec directory's ``seed/`` folder into its workspace once the pod serves it.

The same loader as ``dap seed`` (``dap.server.workflows.seeding``), against the catalog the pod
serves, on a connection of its own: the API's rules, one transaction, idempotent. So the first
start opens on a populated desk, every later start says "nothing new" (a second ``make dev``
loads nothing twice), and a seed record edited in between is applied where the API allows it.
A bad seed loads nothing, and dev goes on serving: the lines say which file, line and field.
``dap serve`` and ``dap pod`` never seed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dap.server import errors as server_errors
from dap.server.catalog import Catalog
from dap.server.storage import db, workspaces
from dap.server.workflows import seeding, seeds

SEED_DIR = "seed"


def seed_files(spec_dir: Path) -> list[tuple[str, str]]:
    """``(name, text)`` of every seed file under ``<spec_dir>/seed``; none when there is no folder."""
    folder = spec_dir / SEED_DIR
    if not folder.is_dir():
        return []
    return [
        (path.relative_to(folder).as_posix(), path.read_text())
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix in seeds.SUFFIXES
    ]


async def load(
    spec_dir: Path, dsn: str, slug: str, catalog: Catalog, say: Callable[[str], None]
) -> seeding.Report | None:
    """Load the seed of ``spec_dir`` into ``slug``; say what happened. ``None`` when nothing ran."""
    files = seed_files(spec_dir)
    if not files:
        return None
    where = spec_dir / SEED_DIR
    try:
        rows = seeds.parse_files(files)
    except seeds.SeedFileError as exc:
        _refused(say, where, exc.problems)
        return None
    pool = await db.open_pool(dsn, 1)
    try:
        async with pool.acquire() as conn:
            workspace = await workspaces.find(conn, slug)
            if workspace is None:
                say(f"seed: workspace {slug!r} is not registered yet; {where} not loaded")
                return None
            report = await seeding.load(conn, catalog, workspace.tenant_id, rows)
    except seeding.SeedError as exc:
        _refused(say, where, exc.problems)
        return None
    except server_errors.ServerError as exc:
        say(f"seed: {where} not loaded: {exc}")
        return None
    finally:
        await pool.close()
    if report.created or report.updated:
        say(f"seed: {where} into {slug!r}: {report.summary()}")
    else:
        say(f"seed: nothing new in {where} ({report.unchanged} record(s) loaded before)")
    for note in report.notes:
        say(f"  not applied: {note}")
    return report


def _refused(say: Callable[[str], None], where: Path, problems: list[seeds.Problem]) -> None:
    say(f"seed: {where} has {len(problems)} problem(s); nothing was loaded:")
    for problem in problems:
        say(f"  {where}/{problem}")
