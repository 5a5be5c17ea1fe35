"""The block-sequential gate: pairing, evidence processes and the decision (GATE.md §2-§5).

Everything here is a pure function of integers and floats:

* :func:`pair_block` turns one block of baseline/candidate outcomes into discordant-sign counts
  (candidate infra failures imputed as wrong, baseline infra failures dropped; GATE §2).
* :func:`log_mixture_e` is the mixture betting e-process E⁺ (and E⁻ with W and L swapped; §3.2-3.3),
  :func:`log_sprt` the direction SPRT Λ (§3.4), :func:`sign_test_p` the exact one-sided sign test,
  :func:`horizon_log_threshold` the exact horizon threshold c_α(d_max) (§3.5).
* :func:`gate_decision` folds one completed block into a :class:`GateState` and returns the
  :class:`GateVerdict` with the precedence of GATE §4.2 (INFRA guard first, §5).

Everything is on the log scale; E⁺ ≥ 1/α is written ``log_e_plus >= ln(1/α)``.

Why it is long: the whole statistical core of GATE.md (pairing, evidence processes, horizon
thresholds, the decision and its checkpointable state) is kept in one pure module so it can be
audited against the spec line by line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final, Literal, TypeVar

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.fingerprint import fingerprint
from trm_assets.domain.quadrants import (
    IMPROVED,
    PERSISTENT_FAIL,
    REGRESSED,
    STABLE_SUCCESS,
    categorize_pair,
)

GateMode = Literal["anytime", "horizon", "hybrid"]
GATE_MODES: Final[tuple[str, ...]] = ("anytime", "horizon", "hybrid")
GATE_STATE_FORMAT: Final = "trm.gate_state/1"

# A pair position: the question id, or (question id, replicate/pass index) when passes > 1.
PairKey = str | tuple[str, int]
K = TypeVar("K", str, tuple[str, int])


class Verdict(StrEnum):
    """What the gate concluded after a block (GATE §4.2-4.3)."""

    ACCEPT = "ACCEPT"
    REJECT_HARM = "REJECT_HARM"
    REJECT_DIR = "REJECT_DIR"
    REJECT_FUTILE = "REJECT_FUTILE"
    REJECT_BUDGET = "REJECT_BUDGET"
    INFRA = "INFRA"
    CONTINUE = "CONTINUE"


REJECTIONS: Final[frozenset[Verdict]] = frozenset(
    {Verdict.REJECT_HARM, Verdict.REJECT_DIR, Verdict.REJECT_FUTILE, Verdict.REJECT_BUDGET}
)

Action = Literal["accept", "reject", "abort", "continue"]


def verdict_action(verdict: Verdict) -> Action:
    """The ``ValidationOutcome.action`` of a verdict (GATE §4.3): accept, reject, abort (INFRA)."""
    if verdict is Verdict.ACCEPT:
        return "accept"
    if verdict in REJECTIONS:
        return "reject"
    if verdict is Verdict.INFRA:
        return "abort"
    return "continue"


# --------------------------------------------------------------------------------------------
# Parameters


@dataclass(frozen=True, slots=True)
class GateParams:
    """Gate configuration (GATE §4.1, defaults and validation of §11)."""

    alpha: float = 0.05
    mode: GateMode = "hybrid"
    alpha_early: float = 0.01
    alpha_harm: float = 0.10
    lambda0: float = 0.4
    lambda_dir: float = math.log(0.1)
    grid_k: int = 20
    grid_max: float = 0.9
    block: int = 10
    infra_max_rate: float = 0.2
    infra_min_denominator: int = 10
    # Stochastic curtailment (issue 15 C): REJECT_FUTILE once the chance of accepting by the end
    # of the plan, were the candidate as good as the design alternative (win share
    # ``(1 + lambda0) / 2`` among discordant pairs), is below this. 0 = only the "unreachable"
    # rule. A futility stop only ever rejects, so it cannot raise the false-accept rate.
    futility_power: float = 0.0
    # Two-stage plan (issue 15 C, temperature 0): after the first ``screen_positions`` positions
    # (the cheap stage: baselines already known), REJECT_FUTILE unless W − L ≥ ``screen_margin``.
    # 0 = off. A rejection rule only, so the false-accept rate cannot rise.
    screen_positions: int = 0
    screen_margin: int = 1
    # GATE §5 refinement: flag (never abort) a candidate whose own infra rate is high while the
    # baseline arm is quiet; the flag goes to the audit row as ``candidate_infra_suspect``.
    candidate_suspect_rate: float = 0.15
    baseline_quiet_rate: float = 0.02

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not 0.0 < self.alpha < 1.0:
            problems.append(f"alpha must be in (0, 1), got {self.alpha}")
        if self.mode not in GATE_MODES:
            problems.append(f"mode must be one of {GATE_MODES}, got {self.mode!r}")
        if self.mode == "hybrid" and not 0.0 < self.alpha_early < self.alpha:
            problems.append(
                f"hybrid mode needs 0 < alpha_early < alpha, got {self.alpha_early} vs {self.alpha}"
            )
        if not 0.0 < self.alpha_harm < 1.0:
            problems.append(f"alpha_harm must be in (0, 1), got {self.alpha_harm}")
        if not 0.0 < self.lambda0 < 1.0:
            problems.append(f"lambda0 must be in (0, 1), got {self.lambda0}")
        if not self.lambda_dir < 0.0:
            problems.append(
                f"lambda_dir must be < 0 (a log-likelihood floor), got {self.lambda_dir}"
            )
        if self.grid_k < 5:
            problems.append(f"grid_k must be >= 5, got {self.grid_k}")
        if not 0.0 < self.grid_max < 1.0:
            problems.append(f"grid_max must be in (0, 1), got {self.grid_max}")
        if self.block < 1:
            problems.append(f"block must be >= 1, got {self.block}")
        if not 0.0 < self.infra_max_rate < 1.0:
            problems.append(f"infra_max_rate must be in (0, 1), got {self.infra_max_rate}")
        if self.screen_positions < 0:
            problems.append(f"screen_positions must be >= 0, got {self.screen_positions}")
        if not 0.0 <= self.futility_power < 1.0:
            problems.append(f"futility_power must be in [0, 1), got {self.futility_power}")
        if self.infra_min_denominator < 10:
            problems.append(
                f"infra_min_denominator must be >= 10, got {self.infra_min_denominator}"
            )
        if problems:
            raise ValueError("invalid GateParams: " + "; ".join(problems))

    @property
    def alpha_final(self) -> float:
        """α₂ = α − α₁, the level of the hybrid's final exact sign test."""
        return self.alpha - self.alpha_early

    def decision_fields(self) -> dict[str, Any]:
        """The fields that change decisions (fingerprinted into a gate checkpoint)."""
        return {
            "alpha": self.alpha,
            "mode": self.mode,
            "alpha_early": self.alpha_early,
            "alpha_harm": self.alpha_harm,
            "lambda0": self.lambda0,
            "lambda_dir": self.lambda_dir,
            "grid_k": self.grid_k,
            "grid_max": self.grid_max,
            "block": self.block,
            "infra_max_rate": self.infra_max_rate,
            "infra_min_denominator": self.infra_min_denominator,
            **({"futility_power": self.futility_power} if self.futility_power else {}),
            **(
                {"screen_positions": self.screen_positions, "screen_margin": self.screen_margin}
                if self.screen_positions
                else {}
            ),
        }


# --------------------------------------------------------------------------------------------
# Evidence


@lru_cache(maxsize=64)
def mixture_grid(grid_k: int = 20, grid_max: float = 0.9) -> tuple[float, ...]:
    """λ_k = grid_max·k/K for k = 1…K: strictly positive bets only (GATE §3.2, never θ < ½)."""
    return tuple(grid_max * k / grid_k for k in range(1, grid_k + 1))


@lru_cache(maxsize=1 << 18)
def log_mixture_e(wins: int, losses: int, grid_k: int = 20, grid_max: float = 0.9) -> float:
    """ln E⁺ = ln (1/K) Σ_k (1+λ_k)^W (1−λ_k)^L (GATE §0.2). ``log_mixture_e(L, W)`` is ln E⁻."""
    if wins < 0 or losses < 0:
        raise ValueError(f"wins and losses must be >= 0, got {wins}, {losses}")
    terms = [
        wins * math.log1p(lam) + losses * math.log1p(-lam) for lam in mixture_grid(grid_k, grid_max)
    ]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms)) - math.log(grid_k)


def log_sprt(wins: int, losses: int, lambda0: float = 0.4) -> float:
    """Λ = W ln(1+λ₀) + L ln(1−λ₀): Wald's log-LR of θ₁ = (1+λ₀)/2 against ½ (§3.4)."""
    return wins * math.log1p(lambda0) + losses * math.log1p(-lambda0)


@lru_cache(maxsize=1 << 16)
def sign_test_p(wins: int, losses: int) -> float:
    """Exact one-sided sign (McNemar) test: P(Bin(W+L, ½) ≥ W); 1.0 with no discordant pair."""
    if wins < 0 or losses < 0:
        raise ValueError(f"wins and losses must be >= 0, got {wins}, {losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(wins, n + 1))
    return tail / (1 << n)  # exact big-integer division, correctly rounded


@lru_cache(maxsize=256)
def horizon_log_threshold(
    d_max: int, alpha: float, grid_k: int = 20, grid_max: float = 0.9
) -> float:
    """ln c_α(d_max): the smallest E⁺ threshold crossed within d_max pairs w.p. ≤ α.

    Dynamic programming over a fair-coin sign walk (every pair discordant, a look after every pair:
    the worst case, GATE §3.5). Only achievable E⁺ values matter, so the threshold is searched among
    them; the result never exceeds the always-valid anytime threshold ln(1/α).
    """
    if d_max < 1:
        raise ValueError(f"d_max must be >= 1, got {d_max}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    anytime = math.log(1.0 / alpha)
    values = sorted(
        {
            log_mixture_e(w, n - w, grid_k, grid_max)
            for n in range(1, d_max + 1)
            for w in range(n + 1)
        }
    )
    values = [v for v in values if v > 0.0]

    def crossing_probability(log_c: float) -> float:
        alive = [1.0]  # alive[w]: P(W_n = w and no crossing so far)
        for n in range(1, d_max + 1):
            nxt = [0.0] * (n + 1)
            for w, mass in enumerate(alive):
                if mass:
                    nxt[w] += 0.5 * mass
                    nxt[w + 1] += 0.5 * mass
            # E⁺ increases with w at fixed n, so the crossing set is {w >= w_star}.
            for w in range(n, -1, -1):
                if log_mixture_e(w, n - w, grid_k, grid_max) >= log_c:
                    nxt[w] = 0.0
                else:
                    break
            alive = nxt
        return 1.0 - sum(alive)

    lo, hi = 0, len(values)  # first index whose crossing probability is <= alpha
    while lo < hi:
        mid = (lo + hi) // 2
        if crossing_probability(values[mid]) <= alpha:
            hi = mid
        else:
            lo = mid + 1
    return min(values[lo], anytime) if lo < len(values) else anytime


# --------------------------------------------------------------------------------------------
# Pairing (GATE §2)


@dataclass(frozen=True, slots=True)
class PairRow:
    """One ladder position of a block: the per-question row of the ``gate_evidence`` audit table."""

    key: PairKey
    baseline: bool | None
    candidate: bool | None
    sign: int | None  # c - b after imputation; None when the pair was dropped (baseline infra)
    quadrant: str | None
    candidate_imputed: bool  # candidate infra failure scored as wrong


@dataclass(frozen=True, slots=True)
class PairResult:
    """One block after pairing, in ladder order (never completion order)."""

    keys: tuple[PairKey, ...]
    signs: tuple[int, ...]
    rows: tuple[PairRow, ...]
    n_improved: int
    n_regressed: int
    n_persistent_fail: int
    n_stable_success: int
    n_infra_baseline: int
    n_infra_candidate: int
    baseline_attempted: int
    candidate_attempted: int

    def __post_init__(self) -> None:
        """A block's counts are those of its signs (:func:`pair_block` builds them so): a
        hand-built block that disagrees is refused here, before any gate state takes it."""
        counts = (
            self.n_improved,
            self.n_regressed,
            self.n_persistent_fail,
            self.n_stable_success,
            self.n_infra_baseline,
            self.n_infra_candidate,
            self.baseline_attempted,
            self.candidate_attempted,
        )
        if min(counts) < 0:
            raise ValueError(f"a block's counts must be >= 0, got {counts}")
        if any(s not in (-1, 0, 1) for s in self.signs):
            raise ValueError("a pair's sign is -1, 0 or +1")
        by_sign = (self.signs.count(1), self.signs.count(-1), self.signs.count(0))
        if (self.n_improved, self.n_regressed, self.n_ties) != by_sign:
            raise ValueError(
                f"a block's wins/losses/ties ({self.n_improved}, {self.n_regressed}, "
                f"{self.n_ties}) disagree with its signs {by_sign}"
            )
        if len(self.signs) + self.n_infra_baseline != len(self.keys):
            raise ValueError(
                f"a block of {len(self.keys)} positions has {len(self.signs)} pairs and "
                f"{self.n_infra_baseline} baseline failures"
            )
        # the audit rows are the block's too (review: a block without rows and with 5 candidate
        # failures on 3 positions was taken, and aborted its gate as INFRA)
        if tuple(r.key for r in self.rows) != self.keys:
            raise ValueError(
                f"a block's rows ({len(self.rows)}) must be one per position, in its order "
                f"({len(self.keys)})"
            )
        from_rows = (
            tuple(r.sign for r in self.rows if r.sign is not None),
            sum(r.baseline is None for r in self.rows),
            sum(r.candidate is None for r in self.rows),
        )
        if from_rows != (self.signs, self.n_infra_baseline, self.n_infra_candidate):
            raise ValueError(
                f"a block's rows say {from_rows[1]} baseline and {from_rows[2]} candidate "
                f"failures (signs {from_rows[0] == self.signs}), its counts "
                f"{self.n_infra_baseline} and {self.n_infra_candidate}"
            )

    @property
    def n_attempted(self) -> int:
        """Rollouts actually run in this block, both arms; cache hits excluded (GATE §5)."""
        return self.baseline_attempted + self.candidate_attempted

    @property
    def n_pairs(self) -> int:
        """Usable pairs (baseline observed)."""
        return len(self.signs)

    @property
    def n_positions(self) -> int:
        """Positions consumed: usable pairs plus pairs dropped for a baseline infra failure."""
        return len(self.keys)

    @property
    def n_ties(self) -> int:
        return self.n_persistent_fail + self.n_stable_success


def pair_block(
    ladder_keys: Sequence[K],
    baseline: Mapping[K, bool | None],
    candidate: Mapping[K, bool | None],
    baseline_attempted: int,
    candidate_attempted: int,
) -> PairResult:
    """Pair one block (GATE §2). ``None`` is an infrastructure failure, ``False`` a task failure.

    Candidate infra failures are imputed as wrong (keeps the e-process valid when the candidate
    causes them); baseline infra failures drop the pair (they do not depend on the candidate).
    ``*_attempted`` count rollouts really run in this block (cache hits excluded).
    """
    if baseline_attempted < 0 or candidate_attempted < 0:
        raise ValueError("attempted counts must be >= 0")
    if len(set(ladder_keys)) != len(ladder_keys):
        raise ValueError("a block lists the same ladder key twice; key passes by (qid, rep)")
    missing = [k for k in ladder_keys if k not in baseline or k not in candidate]
    if missing:
        raise ValueError(
            f"block outcome maps lack {len(missing)} ladder key(s), e.g. {missing[0]!r}; "
            "every ladder position needs a baseline and a candidate entry (None = infra failure)"
        )
    counts = {IMPROVED: 0, REGRESSED: 0, PERSISTENT_FAIL: 0, STABLE_SUCCESS: 0}
    signs: list[int] = []
    rows: list[PairRow] = []
    n_infra_b = n_infra_c = 0
    for key in ladder_keys:
        b, c = baseline[key], candidate[key]
        if c is None:
            n_infra_c += 1
        if b is None:
            n_infra_b += 1
            rows.append(PairRow(key, None, c, None, None, candidate_imputed=False))
            continue
        c_scored = c if c is not None else False
        quadrant = categorize_pair(b, c_scored)
        counts[quadrant] += 1
        sign = int(c_scored) - int(b)
        signs.append(sign)
        rows.append(PairRow(key, b, c, sign, quadrant, candidate_imputed=c is None))
    return PairResult(
        keys=tuple(ladder_keys),
        signs=tuple(signs),
        rows=tuple(rows),
        n_improved=counts[IMPROVED],
        n_regressed=counts[REGRESSED],
        n_persistent_fail=counts[PERSISTENT_FAIL],
        n_stable_success=counts[STABLE_SUCCESS],
        n_infra_baseline=n_infra_b,
        n_infra_candidate=n_infra_c,
        baseline_attempted=baseline_attempted,
        candidate_attempted=candidate_attempted,
    )


def gate_plan(
    ladder_qids: Sequence[str], passes: int, block: int, max_blocks: int | None = None
) -> tuple[tuple[str, int], ...]:
    """The gate's positions (qid, rep), fixed before the first block (§4.4); d_max = its length.

    Passes cycle the whole ladder with fresh draws of both arms; ``max_blocks`` truncates the plan.
    """
    if passes < 1 or block < 1:
        raise ValueError(f"passes and block must be >= 1, got {passes}, {block}")
    if max_blocks is not None and max_blocks < 1:
        raise ValueError(f"max_blocks must be >= 1, got {max_blocks}")
    plan = tuple((q, rep) for rep in range(passes) for q in ladder_qids)
    return plan if max_blocks is None else plan[: max_blocks * block]


def chunk_plan(plan: Sequence[K], block: int) -> tuple[tuple[K, ...], ...]:
    """Cut a plan into consecutive blocks of ``block`` positions (the last may be shorter)."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    return tuple(tuple(plan[i : i + block]) for i in range(0, len(plan), block))


#: GATE §11: SMALL_POOL_PASSES passes for task-type pools under SMALL_POOL questions, else 1.
SMALL_POOL: Final = 60
SMALL_POOL_PASSES: Final = 3


def default_passes(pool_size: int) -> int:
    """GATE §11: 3 passes for task-type pools under 60 questions, else 1."""
    return SMALL_POOL_PASSES if pool_size < SMALL_POOL else 1


# --------------------------------------------------------------------------------------------
# Decision (GATE §4)


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """The decision after one block, and the block's evidence row for the audit table."""

    verdict: Verdict
    log_e_plus: float
    log_e_minus: float
    log_sprt: float
    p_final: float  # exact one-sided sign-test p of the cumulative (W, L)
    wins: int
    losses: int
    ties: int
    pairs: int
    positions: int
    blocks: int
    d_max: int
    infra: int
    attempted: int
    infra_rate: float
    candidate_infra_suspect: bool
    last: bool
    reachable: bool
    block_improved: int
    block_regressed: int
    block_ties: int

    @property
    def action(self) -> Action:
        return verdict_action(self.verdict)


@dataclass(slots=True)
class GateState:
    """Cumulative gate state; checkpoints as integers (:func:`gate_state_to_dict`).

    ``d_max`` (positions) is fixed before the first block; changing it mid-gate would void the
    horizon and hybrid guarantees (GATE §3.5), so it is not writable through the API.
    """

    d_max: int
    log_thr_horizon: float | None = None
    wins: int = 0
    losses: int = 0
    ties: int = 0
    pairs: int = 0
    positions: int = 0
    infra_baseline: int = 0
    infra_candidate: int = 0
    attempted_baseline: int = 0
    attempted_candidate: int = 0
    blocks: int = 0
    terminal: Verdict | None = None
    history: list[GateVerdict] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.d_max - self.positions

    @property
    def infra(self) -> int:
        return self.infra_baseline + self.infra_candidate

    @property
    def attempted(self) -> int:
        return self.attempted_baseline + self.attempted_candidate


def new_gate_state(d_max: int, params: GateParams) -> GateState:
    """A fresh state for a gate of ``d_max`` positions (the horizon threshold is computed once)."""
    if d_max < 1:
        raise ValueError(f"a gate needs at least one position (d_max >= 1), got {d_max}")
    thr = (
        horizon_log_threshold(d_max, params.alpha, params.grid_k, params.grid_max)
        if params.mode == "horizon"
        else None
    )
    return GateState(d_max=d_max, log_thr_horizon=thr)


def _binom_pmf(n: int, p: float) -> list[float]:
    if p <= 0.0 or p >= 1.0:
        return [float(k == (n if p >= 1.0 else 0)) for k in range(n + 1)]
    lp, lq = math.log(p), math.log1p(-p)
    return [
        math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp
                 + (n - k) * lq)
        for k in range(n + 1)
    ]  # fmt: skip


def conditional_power(
    wins: int, losses: int, pairs: int, remaining: int, params: GateParams, log_thr: float
) -> float:
    """P(the gate accepts at the end of its plan | the evidence so far), were the candidate as
    good as the design alternative: each remaining position is a discordant pair with the
    discordance observed so far (a uniform prior: ``(W + L + 1) / (pairs + 2)``), won with
    probability ``(1 + lambda0) / 2``. Only the end of the plan is counted (the e-process may
    cross earlier), so this is a lower bound of the chance the rule forgoes: a futility stop
    based on it is conservative for power and, being a rejection, free for the error rate."""
    if remaining <= 0:
        return 0.0
    d_hat = (wins + losses + 1) / (pairs + 2)
    p1 = (1.0 + params.lambda0) / 2.0
    k, gmax = params.grid_k, params.grid_max

    def accepts(w: int, los: int) -> bool:
        if log_mixture_e(w, los, k, gmax) >= log_thr:
            return True
        return params.mode == "hybrid" and sign_test_p(w, los) <= params.alpha_final

    total = 0.0
    for d, pd in enumerate(_binom_pmf(remaining, d_hat)):
        if pd < 1e-12:
            continue
        # the accept region is monotone in the future wins: find the least that accepts
        lo, hi = 0, d + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if accepts(wins + mid, losses + d - mid):
                hi = mid
            else:
                lo = mid + 1
        if lo <= d:
            total += pd * sum(_binom_pmf(d, p1)[lo:])
    return total


def _accept_threshold(state: GateState, params: GateParams) -> float:
    if params.mode == "anytime":
        return math.log(1.0 / params.alpha)
    if params.mode == "horizon":
        if state.log_thr_horizon is None:
            state.log_thr_horizon = horizon_log_threshold(
                state.d_max, params.alpha, params.grid_k, params.grid_max
            )
        return state.log_thr_horizon
    return math.log(1.0 / params.alpha_early)


def gate_decision(state: GateState, block: PairResult, params: GateParams) -> GateVerdict:
    """Fold one completed block into ``state`` and decide (GATE §4.2). Called once per block.

    Precedence: INFRA, ACCEPT, REJECT_HARM, REJECT_DIR, REJECT_BUDGET (last block), REJECT_FUTILE,
    CONTINUE. The verdict is appended to ``state.history``; a terminal verdict closes the gate.
    """
    if state.terminal is not None:
        raise ValueError(
            f"the gate already ended with {state.terminal.value}; start a new GateState"
        )
    if block.n_positions < 1:
        raise ValueError("an empty block cannot be decided on")
    if block.n_positions > params.block:
        raise ValueError(
            f"block has {block.n_positions} positions but gate_block is {params.block}"
        )
    if state.positions + block.n_positions > state.d_max:
        raise ValueError(
            f"block would take the gate to {state.positions + block.n_positions} positions, "
            f"beyond d_max={state.d_max} fixed at gate start"
        )
    before = state.positions
    state.wins += block.n_improved
    state.losses += block.n_regressed
    state.ties += block.n_ties
    state.pairs += block.n_pairs
    state.positions += block.n_positions
    state.infra_baseline += block.n_infra_baseline
    state.infra_candidate += block.n_infra_candidate
    state.attempted_baseline += block.baseline_attempted
    state.attempted_candidate += block.candidate_attempted
    state.blocks += 1

    w, los, rem = state.wins, state.losses, state.remaining
    last = rem == 0
    k, gmax = params.grid_k, params.grid_max
    log_e_plus = log_mixture_e(w, los, k, gmax)
    log_e_minus = log_mixture_e(los, w, k, gmax)
    lam = log_sprt(w, los, params.lambda0)
    p_now = sign_test_p(w, los)
    threshold = _accept_threshold(state, params)
    if params.mode == "hybrid":
        accept = log_e_plus >= threshold or (last and p_now <= params.alpha_final)
        reachable = (
            log_mixture_e(w + rem, los, k, gmax) >= threshold
            or sign_test_p(w + rem, los) <= params.alpha_final
        )
    else:
        accept = log_e_plus >= threshold
        reachable = log_mixture_e(w + rem, los, k, gmax) >= threshold

    screened_out = (
        params.screen_positions > 0
        and before < params.screen_positions <= state.positions
        and w - los < params.screen_margin
    )
    attempted = state.attempted
    infra_rate = state.infra / attempted if attempted else 0.0
    cand_rate = (
        state.infra_candidate / state.attempted_candidate if state.attempted_candidate else 0.0
    )
    base_rate = state.infra_baseline / state.attempted_baseline if state.attempted_baseline else 0.0
    suspect = cand_rate > params.candidate_suspect_rate and base_rate <= params.baseline_quiet_rate

    if attempted >= params.infra_min_denominator and infra_rate > params.infra_max_rate:
        verdict = Verdict.INFRA
    elif accept:
        verdict = Verdict.ACCEPT
    elif log_e_minus >= math.log(1.0 / params.alpha_harm):
        verdict = Verdict.REJECT_HARM
    elif lam <= params.lambda_dir:
        verdict = Verdict.REJECT_DIR
    elif last:
        verdict = Verdict.REJECT_BUDGET
    elif (
        not reachable
        or screened_out
        or (
            params.futility_power > 0.0
            and conditional_power(w, los, state.pairs, rem, params, threshold)
            < params.futility_power
        )
    ):
        verdict = Verdict.REJECT_FUTILE
    else:
        verdict = Verdict.CONTINUE

    result = GateVerdict(
        verdict=verdict,
        log_e_plus=log_e_plus,
        log_e_minus=log_e_minus,
        log_sprt=lam,
        p_final=p_now,
        wins=w,
        losses=los,
        ties=state.ties,
        pairs=state.pairs,
        positions=state.positions,
        blocks=state.blocks,
        d_max=state.d_max,
        infra=state.infra,
        attempted=attempted,
        infra_rate=infra_rate,
        candidate_infra_suspect=suspect,
        last=last,
        reachable=reachable,
        block_improved=block.n_improved,
        block_regressed=block.n_regressed,
        block_ties=block.n_ties,
    )
    state.history.append(result)
    if verdict is not Verdict.CONTINUE:
        state.terminal = verdict
    return result


# --------------------------------------------------------------------------------------------
# Checkpoint (integers only; the horizon threshold is recomputed from d_max and the params)

_STATE_INT_FIELDS: Final[tuple[str, ...]] = (
    "d_max",
    "wins",
    "losses",
    "ties",
    "pairs",
    "positions",
    "infra_baseline",
    "infra_candidate",
    "attempted_baseline",
    "attempted_candidate",
    "blocks",
)


def _state_body(state: GateState, params: GateParams) -> dict[str, Any]:
    body: dict[str, Any] = {name: getattr(state, name) for name in _STATE_INT_FIELDS}
    body["terminal"] = state.terminal.value if state.terminal is not None else None
    body["params"] = params.decision_fields()
    return body


def gate_state_to_dict(state: GateState, params: GateParams) -> dict[str, Any]:
    """A JSON-ready checkpoint: the integer counts, the terminal verdict, params and fingerprint.

    The per-block history is not part of it: it lives in the ``gate_evidence`` table.
    """
    body = _state_body(state, params)
    return {"format": GATE_STATE_FORMAT, **body, "fingerprint": fingerprint(body)}


def gate_state_from_dict(
    data: Mapping[str, Any], params: GateParams, source: str = "gate state"
) -> GateState:
    """Restore a checkpoint; refuses another format, non-integer counts, a params change or a
    fingerprint mismatch with a :class:`DataFormatError` naming the problem."""
    if data.get("format") != GATE_STATE_FORMAT:
        raise DataFormatError(
            source, None, "format", f"{GATE_STATE_FORMAT!r}, got {data.get('format')!r}"
        )
    problems: list[str] = []
    for name in _STATE_INT_FIELDS:
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"field {name!r}: expected a non-negative integer, got {value!r}")
    terminal = data.get("terminal")
    if terminal is not None and terminal not in Verdict.__members__:
        problems.append(f"field 'terminal': expected a verdict name or null, got {terminal!r}")
    if problems:
        raise DataFormatError.from_messages(source, problems)
    if data.get("params") != params.decision_fields():
        raise DataFormatError(
            source,
            None,
            "params",
            "the gate parameters the gate started with (they changed mid-gate)",
        )
    state = GateState(d_max=int(data["d_max"]))
    for name in _STATE_INT_FIELDS:
        setattr(state, name, int(data[name]))
    state.terminal = Verdict(terminal) if terminal is not None else None
    if state.d_max < 1 or state.positions > state.d_max:
        raise DataFormatError(
            source,
            None,
            "positions",
            f"0 <= positions <= d_max >= 1, got {state.positions}/{state.d_max}",
        )
    expected = fingerprint(_state_body(state, params))
    if data.get("fingerprint") != expected:
        raise DataFormatError(
            source, None, "fingerprint", f"{expected!r} (the file was edited or corrupted)"
        )
    if params.mode == "horizon":
        state.log_thr_horizon = horizon_log_threshold(
            state.d_max, params.alpha, params.grid_k, params.grid_max
        )
    return state


# --------------------------------------------------------------------------------------------
# Rejected-buffer semantics (GATE §4.3)

VERIFIED_HARMFUL: Final = "verified_harmful"
NOT_VERIFIED: Final = "not_verified"


def rejection_tag(verdict: Verdict) -> str:
    """``verified_harmful`` only for REJECT_HARM; every other rejection is ``not_verified``."""
    if verdict not in REJECTIONS:
        raise ValueError(
            f"{verdict.value} is not a rejection; only rejections enter the rejected buffer"
        )
    return VERIFIED_HARMFUL if verdict is Verdict.REJECT_HARM else NOT_VERIFIED
