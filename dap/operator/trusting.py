"""The artifact-signing public keys that resource pods trust, learnt from the control plane.

Resource pods verify every artifact against ``DAP_TRUSTED_KEYS`` (ARCHITECTURE.md); the operator
puts that value into each workspace's ConfigMap. The keys come from the cluster control plane's
``GET /v1/keys``. Accepted shapes (the control plane's answer is parsed leniently, the keys
strictly): ``{"keys": ["<hex>", …]}`` or ``{"keys": [{"public_key": "<hex>", …}, …]}``; only
64-hex-character ed25519 keys are kept, sorted and deduplicated so that the same set always
renders the same ConfigMap (and therefore writes nothing).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import aiohttp

logger = logging.getLogger(__name__)

_HEX_KEY = re.compile(r"[0-9a-f]{64}")


def parse_keys(body: Any) -> tuple[str, ...]:
    """The valid hex ed25519 public keys of a ``/v1/keys`` answer, sorted."""
    entries = body.get("keys", []) if isinstance(body, dict) else []
    found: set[str] = set()
    for entry in entries if isinstance(entries, list) else []:
        value = entry.get("public_key") if isinstance(entry, dict) else entry
        if isinstance(value, str) and _HEX_KEY.fullmatch(value.strip().lower()):
            found.add(value.strip().lower())
    return tuple(sorted(found))


async def fetch_keys(session: aiohttp.ClientSession, control_url: str) -> tuple[str, ...] | None:
    """The control plane's keys, or None when it cannot be asked (the caller keeps what it had)."""
    url = f"{control_url.rstrip('/')}/v1/keys"
    try:
        async with session.get(url) as response:
            if response.status != 200:
                logger.warning("GET %s answered %s; keeping the trusted keys", url, response.status)
                return None
            return parse_keys(await response.json(content_type=None))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        logger.warning("GET %s failed: %r; keeping the trusted keys", url, exc)
        return None
