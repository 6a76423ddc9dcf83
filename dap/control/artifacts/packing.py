"""Author side of registration: collect a directory's files, honouring ``.dapignore``.

Everything under the directory is part of the artifact (manifests, scripts, app code, assets)
except what ``.dapignore`` excludes and a few entries that are never content (``.git``, ``.dap``,
``__pycache__``, ``.dapignore`` itself). ``.dapignore`` holds one glob per line, ``#`` comments:
a pattern with a ``/`` matches the relative path from the directory (``assets/*.psd``), one
without matches any path segment (``*.pyc``, ``node_modules``); a trailing ``/`` matches
directories only. There is no negation (``!``): keep the rules simple enough to read at a glance.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

ALWAYS_IGNORED = (".git", ".dap", "__pycache__", ".dapignore", ".DS_Store")


@dataclass(frozen=True)
class Rule:
    pattern: str
    directory_only: bool
    anchored: bool

    def matches(self, relative: str, is_dir: bool) -> bool:
        if self.directory_only and not is_dir:
            return False
        if self.anchored:
            return fnmatch.fnmatchcase(relative, self.pattern)
        return fnmatch.fnmatchcase(relative.rsplit("/", 1)[-1], self.pattern)


def parse_ignore(text: str) -> list[Rule]:
    rules = [Rule(name, directory_only=False, anchored=False) for name in ALWAYS_IGNORED]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        directory_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append(Rule(line.lstrip("/"), directory_only, anchored))
    return rules


def collect(directory: Path) -> dict[str, bytes]:
    """Relative path (forward slashes) -> bytes of every file that is not ignored."""
    ignore_file = directory / ".dapignore"
    rules = parse_ignore(ignore_file.read_text(encoding="utf-8") if ignore_file.is_file() else "")
    files: dict[str, bytes] = {}

    def walk(folder: Path) -> None:
        for entry in sorted(folder.iterdir()):
            relative = entry.relative_to(directory).as_posix()
            is_dir = entry.is_dir()
            if any(rule.matches(relative, is_dir) for rule in rules):
                continue
            if is_dir:
                walk(entry)
            elif entry.is_file():
                files[relative] = entry.read_bytes()

    walk(directory)
    return files
