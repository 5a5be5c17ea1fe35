"""Run-level error control over many gates (GATE §6.4, config fields of §11).

Per-gate α does not control a run: the expected number of false ACCEPTs is about α × #null gates.
Three policies, all valid under arbitrary dependence between gates:

* ``per_gate`` (default): every gate at ``gate_alpha``; report α × #gates as the run-level
  expectation of false ACCEPTs.
* ``pfer``: α_j = B·γ_j with Σγ_j ≤ 1 over G_max gates (uniform γ_j = 1/G_max), so
  E[#false accepts] ≤ B.
* ``elond``: α_j = α_FDR·γ_j·(R_{j−1}+1) with γ normalised over G_max, accept iff the stopped E⁺_j
  ≥ 1/α_j; needs e-values, hence gate mode ``anytime``. The level formula is the LOND form as GATE
  §12 recalls it for e-LOND (Xu & Ramdas 2024); check it against the paper before relying on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Final, Literal

from trm_assets.domain.gate import GateParams

RunErrorPolicy = Literal["per_gate", "pfer", "elond"]
RUN_ERROR_POLICIES: Final[tuple[str, ...]] = ("per_gate", "pfer", "elond")


@lru_cache(maxsize=64)
def _lond_weights(horizon: int) -> tuple[float, ...]:
    raw = [
        0.0722 * math.log(max(j, 2)) / (j * math.exp(math.sqrt(math.log(max(j, 2)))))
        for j in range(1, horizon + 1)
    ]
    total = sum(raw)
    return tuple(r / total for r in raw)


def lond_gamma(j: int, horizon: int) -> float:
    """γ_j of the LOND sequence 0.0722·ln j/(j·e^√ln j) (ln j read as ln max(j, 2)), renormalised
    so that Σ_{j ≤ horizon} γ_j = 1 (the infinite-horizon sequence spends only ~22% of its budget in
    the first 200 gates, GATE §6.4). ``j`` is 1-based."""
    if horizon < 1 or not 1 <= j <= horizon:
        raise ValueError(f"need 1 <= j <= horizon, got j={j}, horizon={horizon}")
    return _lond_weights(horizon)[j - 1]


@dataclass(frozen=True, slots=True)
class RunErrorParams:
    """``run_error_policy``, ``run_pfer_budget``, ``run_fdr_alpha``, ``run_max_gates`` (§11)."""

    policy: RunErrorPolicy = "per_gate"
    pfer_budget: float = 1.0
    fdr_alpha: float = 0.10
    max_gates: int = 1

    def __post_init__(self) -> None:
        if self.policy not in RUN_ERROR_POLICIES:
            raise ValueError(f"policy must be one of {RUN_ERROR_POLICIES}, got {self.policy!r}")
        if self.pfer_budget <= 0 or self.fdr_alpha <= 0:
            raise ValueError("run_pfer_budget and run_fdr_alpha must be > 0")
        if self.max_gates < 1:
            raise ValueError(f"run_max_gates must be >= 1, got {self.max_gates}")


def gate_params_for(
    j: int, accepts_before: int, base: GateParams, run: RunErrorParams
) -> GateParams:
    """The :class:`GateParams` of the run's j-th gate (1-based) under the run's policy.

    ``accepts_before`` is R_{j−1}, the number of ACCEPTs of earlier gates (used by e-LOND only).
    Refuses a gate beyond ``max_gates`` (G_max must be fixed before the run) and e-LOND with a
    gate mode other than ``anytime`` (its accepts must be e-values).
    """
    if not 1 <= j <= run.max_gates:
        raise ValueError(f"gate {j} is outside 1..run_max_gates={run.max_gates}")
    if accepts_before < 0:
        raise ValueError("accepts_before must be >= 0")
    if run.policy == "per_gate":
        return base
    if run.policy == "pfer":
        alpha = min(run.pfer_budget / run.max_gates, 0.5)
    else:
        if base.mode != "anytime":
            raise ValueError("run_error_policy 'elond' needs gate_mode 'anytime' (e-values)")
        alpha = min(run.fdr_alpha * lond_gamma(j, run.max_gates) * (accepts_before + 1), 0.5)
    early = min(base.alpha_early, alpha / 5.0)  # keep hybrid's α₁ < α with the same 1:4 split
    # every other field as configured (a review found futility_power and the screen fields
    # dropped under pfer/elond when each was copied by hand)
    return replace(base, alpha=alpha, alpha_early=early)


def expected_false_accepts_bound(alphas: list[float] | tuple[float, ...]) -> float:
    """The run-level report: Σ_j α_j over the gates run, an upper bound on E[#false ACCEPTs]
    (α × #gates under the ``per_gate`` policy)."""
    return float(math.fsum(alphas))
