"""Named, independent random streams derived from the run seed.

Every random choice takes a generator from :func:`rng_for` (seed, purpose, *parts): the same
config + seed gives the same streams, and adding a new purpose never shifts an existing one.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stream_key(seed: int, purpose: str, *parts: int | str) -> list[int]:
    """A stable entropy list for ``np.random.SeedSequence`` (no Python ``hash`` randomization)."""
    digest = hashlib.sha256("\x1f".join([purpose, *map(str, parts)]).encode()).digest()
    return [
        seed & 0xFFFFFFFF,
        (seed >> 32) & 0xFFFFFFFF,
        *np.frombuffer(digest[:16], dtype="<u4").tolist(),
    ]


def rng_for(seed: int, purpose: str, *parts: int | str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(stream_key(seed, purpose, *parts)))
