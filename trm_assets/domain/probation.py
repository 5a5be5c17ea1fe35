"""``probation_verdict`` (GATE §7): the pool-level replication filter after an ACCEPT.

Asymmetric on purpose: the gate already bounded false ACCEPTs, probation only rolls back what
looks worse on the *whole* validation pool of the task type with fresh, independent draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from trm_assets.domain.gate import log_mixture_e
from trm_assets.domain.ladder import GATE_RUN_MARK
from trm_assets.domain.quadrants import IMPROVED, REGRESSED, classify_quadrants


class ProbationVerdict(StrEnum):
    DEFER = "DEFER"
    ROLLBACK = "ROLLBACK"
    KEEP = "KEEP"
    KEEP_CONFIRMED = "KEEP_CONFIRMED"


@dataclass(frozen=True, slots=True)
class ProbationParams:
    """GATE §11 ``probation_*`` fields; ``alpha_confirm`` sets the KEEP_CONFIRMED label."""

    alpha_harm: float = 0.10
    rollback_margin: int = 0
    min_pairs: int = 10
    alpha_confirm: float = 0.05
    grid_k: int = 20
    grid_max: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha_harm < 1.0 or not 0.0 < self.alpha_confirm < 1.0:
            raise ValueError("alpha_harm and alpha_confirm must be in (0, 1)")
        if self.rollback_margin < 0 or self.min_pairs < 0:
            raise ValueError("rollback_margin and min_pairs must be >= 0")


@dataclass(frozen=True, slots=True)
class ProbationResult:
    verdict: ProbationVerdict
    wins: int  # current right, anchor wrong
    losses: int  # anchor right, current wrong
    pairs: int  # questions observed in both arms
    log_e_harm: float
    log_e_confirm: float
    reason: str


def probation_verdict(
    anchor: Mapping[str, bool | None],
    current: Mapping[str, bool | None],
    *,
    confounded: bool = False,
    params: ProbationParams | None = None,
    anchor_run_id: str | None = None,
) -> ProbationResult:
    """Settle a probation on the whole validation pool of one task type (GATE §7).

    ``anchor``: full-validation outcomes of the version before the accepted edits, independent of
    the gate's baseline draws; ``current``: the slow update's rerun R. One draw each, paired by qid;
    ``None`` (infra) and one-sided questions are left out. ``confounded``: prompts, tools or other
    skills affecting this type changed and the anchor was not re-run under the new context.
    ``anchor_run_id``: when given, an anchor drawn by a gate run (``_gate_`` in the id, i.e. the
    gate's cached baseline) is refused: probation must be independent of the gate (GATE §6.6).
    """
    if anchor_run_id is not None and GATE_RUN_MARK in anchor_run_id:
        raise ValueError(
            f"probation anchor run {anchor_run_id!r} is a gate run; the anchor must be independent "
            "of the gate's baseline draws (GATE §6.6): re-run the anchor or use an unused R draw"
        )
    p = params or ProbationParams()
    quad = classify_quadrants(anchor, current)
    counts = quad.counts()
    w, los = counts[IMPROVED], counts[REGRESSED]
    pairs = sum(counts.values())
    log_harm = log_mixture_e(los, w, p.grid_k, p.grid_max)
    log_conf = log_mixture_e(w, los, p.grid_k, p.grid_max)

    def result(verdict: ProbationVerdict, reason: str) -> ProbationResult:
        return ProbationResult(verdict, w, los, pairs, log_harm, log_conf, reason)

    if confounded:
        return result(ProbationVerdict.DEFER, "context changed since the anchor; re-run the anchor")
    if pairs < p.min_pairs:
        return result(ProbationVerdict.DEFER, f"only {pairs} paired questions (< {p.min_pairs})")
    if log_harm >= math.log(1.0 / p.alpha_harm):
        return result(ProbationVerdict.ROLLBACK, "E- crossed 1/alpha_harm: verified worse")
    if (w - los) < -p.rollback_margin:
        return result(
            ProbationVerdict.ROLLBACK, f"net {w - los} < -{p.rollback_margin} on the pool"
        )
    if log_conf >= math.log(1.0 / p.alpha_confirm):
        return result(ProbationVerdict.KEEP_CONFIRMED, "E+ crossed 1/alpha_confirm on the pool")
    return result(ProbationVerdict.KEEP, "not worse on the pool")
