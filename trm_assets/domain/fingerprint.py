"""Content fingerprints of serialized kernel values (pools, ladder, gate state, cache entries)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Key-sorted, whitespace-free JSON: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(value: Any) -> str:
    """The first 16 hex digits of the SHA-256 of :func:`canonical_json` (short, stable)."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:16]
