"""The four paired-outcome quadrants (GATE §8): the single source of truth for their names.

``IMPROVED``/``REGRESSED`` are the discordant pairs the gate counts (W and L); the two concordant
quadrants are ties. Display order puts ``REGRESSED`` first (the design's harm-first rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

IMPROVED: Final = "IMPROVED"
REGRESSED: Final = "REGRESSED"
PERSISTENT_FAIL: Final = "PERSISTENT_FAIL"
STABLE_SUCCESS: Final = "STABLE_SUCCESS"

# GATE §8: regressions are shown first, they carry the strongest (harm) signal.
DISPLAY_ORDER: Final[tuple[str, str, str, str]] = (
    REGRESSED,
    IMPROVED,
    PERSISTENT_FAIL,
    STABLE_SUCCESS,
)

# Momentum-label reliability (GATE §8 "labels are noisy").
RELIABLE: Final = "reliable"
WEAK: Final = "weak"


def categorize_pair(before: bool, after: bool) -> str:
    """The quadrant of one question observed in both arms (``before`` = baseline/anchor)."""
    if before:
        return STABLE_SUCCESS if after else REGRESSED
    return IMPROVED if after else PERSISTENT_FAIL


@dataclass(frozen=True, slots=True)
class QuadrantClassification:
    """Question ids per quadrant (each list sorted) plus the ids left out for a missing/None arm."""

    improved: tuple[str, ...]
    regressed: tuple[str, ...]
    persistent_fail: tuple[str, ...]
    stable_success: tuple[str, ...]
    excluded: tuple[str, ...]

    def by_quadrant(self) -> dict[str, tuple[str, ...]]:
        """Quadrant name → ids, in :data:`DISPLAY_ORDER`."""
        table = {
            IMPROVED: self.improved,
            REGRESSED: self.regressed,
            PERSISTENT_FAIL: self.persistent_fail,
            STABLE_SUCCESS: self.stable_success,
        }
        return {name: table[name] for name in DISPLAY_ORDER}

    def counts(self) -> dict[str, int]:
        """Quadrant name → count, in :data:`DISPLAY_ORDER`."""
        return {name: len(ids) for name, ids in self.by_quadrant().items()}


def classify_quadrants(
    before: Mapping[str, bool | None], after: Mapping[str, bool | None]
) -> QuadrantClassification:
    """Classify every question present in either map.

    Only questions observed in both arms are classified; a ``None`` outcome (infrastructure
    failure) or a question missing from one map is ``excluded`` (GATE §8).
    """
    buckets: dict[str, list[str]] = {name: [] for name in DISPLAY_ORDER}
    excluded: list[str] = []
    for qid in sorted(set(before) | set(after)):
        b = before.get(qid)
        a = after.get(qid)
        if b is None or a is None:
            excluded.append(qid)
            continue
        buckets[categorize_pair(b, a)].append(qid)
    return QuadrantClassification(
        improved=tuple(buckets[IMPROVED]),
        regressed=tuple(buckets[REGRESSED]),
        persistent_fail=tuple(buckets[PERSISTENT_FAIL]),
        stable_success=tuple(buckets[STABLE_SUCCESS]),
        excluded=tuple(excluded),
    )


def label_reliability(
    quadrant: str, p_hat_before: float, *, low: float = 0.2, high: float = 0.8
) -> str:
    """Whether a momentum label is trustworthy given the baseline pass-rate estimate (GATE §8).

    REGRESSED on a question with p̂ ≥ ``high`` (a broken stable success) and IMPROVED on one with
    p̂ ≤ ``low`` are reliable; discordant labels on mid-difficulty questions are close to coin flips.
    Concordant labels are reliable only away from the middle too.
    """
    if quadrant not in DISPLAY_ORDER:
        raise ValueError(f"unknown quadrant {quadrant!r}; expected one of {DISPLAY_ORDER}")
    if quadrant == REGRESSED:
        return RELIABLE if p_hat_before >= high else WEAK
    if quadrant == IMPROVED:
        return RELIABLE if p_hat_before <= low else WEAK
    return RELIABLE if (p_hat_before <= low or p_hat_before >= high) else WEAK
