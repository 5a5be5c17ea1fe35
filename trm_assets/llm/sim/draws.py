"""Hash-based random draws and text normalization: the only sources of randomness of the simulator.

Every draw is a pure function of its keys (SHA-256), so results do not depend on call order,
concurrency, the Python version or the platform: the same content reproduces, changed content
redraws (docs/decision-simulator-randomness.md).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
_SEP = "\x1f"
_NON_WORD = re.compile(r"[^a-z0-9]+")


def digest(*keys: object) -> str:
    """Hex SHA-256 of the keys joined by a unit separator."""
    blob = _SEP.join(str(k) for k in keys).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def unit(*keys: object) -> float:
    """A uniform draw in [0, 1) determined by ``keys``."""
    return int(digest(*keys)[:16], 16) / float(1 << 64)


def below(n: int, *keys: object) -> int:
    """A uniform integer in ``range(n)`` determined by ``keys``."""
    if n <= 0:
        raise ValueError(f"below() needs n >= 1, got {n}")
    return int(digest(*keys)[:16], 16) % n


def pick(items: Sequence[T], *keys: object) -> T:
    """One element of ``items`` chosen by ``keys``."""
    return items[below(len(items), *keys)]


def normal(*keys: object) -> float:
    """A standard normal draw (Box-Muller on two hash uniforms)."""
    u1 = max(unit("n1", *keys), 1e-12)
    u2 = unit("n2", *keys)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def shuffled(items: Sequence[T], *keys: object) -> list[T]:
    """``items`` in an order determined by ``keys`` (sort by per-item hash, stable)."""
    order = sorted(range(len(items)), key=lambda i: (digest(*keys, i), i))
    return [items[i] for i in order]


def weighted_index(weights: Sequence[float], *keys: object) -> int:
    """An index drawn with probability proportional to ``weights``."""
    total = sum(weights)
    if total <= 0:
        raise ValueError("weighted_index() needs a positive total weight")
    u = unit(*keys) * total
    acc = 0.0
    for i, w in enumerate(weights):
        acc += w
        if u < acc:
            return i
    return len(weights) - 1


@functools.lru_cache(maxsize=8192)
def normalize_text(text: str) -> str:
    """Lower case, every run of non-alphanumerics → one space, padded with one space each side.

    Padding makes ``" phrase " in normalize_text(doc)`` a whole-word containment test.
    """
    return " " + _NON_WORD.sub(" ", text.lower()).strip() + " "


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)
