"""How much a second gate pass replays the first: the evidence for ``gate_fresh_temperature``.

A gate pass pairs the candidate's and the baseline's rollout of each question; the paired
difference is ``d = b − a`` ∈ {−1, 0, 1}. Repeated passes count every discordant pair as new
evidence, which holds when a question's second pass is independent of its first. What breaks it
is a persistent, text-specific part of each answer (GATE §10.2's least favourable null, a model
whose samples lean on its greedy answer): the question's difference then repeats across passes.
Measured with two passes of two texts on the same questions::

    ρ_d = E[d₁·d₂] / E[d²]

``E[d₁·d₂]`` is the mean over questions of ``(p_B,q − p_A,q)²`` when passes are independent draws
(0 when the two texts give every question the same probability) and grows with what the passes
share beyond that; ``E[d²]`` is the discordance rate. A fully replayed pass has ρ_d = 1.

The threshold is the worst case the gate is designed for: with both arms' per-question latent
parts of correlation r between passes (every question at p = ½, the edit redrawing every answer),
ρ_d = 2·arcsin(r)/π, and ``trm bench gate --worst-case`` keeps three passes within α up to
r = :data:`INDEPENDENT_MAX_CORRELATION` (4.58% ± 0.30 at α = .05, N = 50).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import numpy as np

#: The largest latent correlation between two draws of one prompt at which three gate passes keep
#: the least favourable null within α (`trm bench gate --worst-case --replicates 5000`: 3 passes,
#: N = 50, r = 0.25 → 4.58%; r = 0.5 → 6.66%). A simulated world whose draws at the agent
#: temperature correlate more is refused where the gate would count them as independent
#: (RunConfig's cross-field check); a measured ρ_d above :data:`MAX_PASS_DEPENDENCE` says the same
#: of a real server.
INDEPENDENT_MAX_CORRELATION: Final = 0.25

#: ρ_d of the worst case at :data:`INDEPENDENT_MAX_CORRELATION`: 2·arcsin(0.25)/π ≈ 0.161.
MAX_PASS_DEPENDENCE: Final = 2.0 * math.asin(INDEPENDENT_MAX_CORRELATION) / math.pi

BOOTSTRAP_RESAMPLES: Final = 2000
#: Questions with a discordant pair an INDEPENDENT verdict needs: with fewer, the percentile
#: interval's upper bound is too low (at ρ_d = 0.161 with 10 such questions 14% of probes call
#: it independent; with 50 or more 2.8%, the interval's nominal 2.5%: 400 synthetic probes each).
MIN_DISCORDANT_QUESTIONS: Final = 50
CONFIDENCE: Final = 0.95


class PassVerdict(StrEnum):
    """What two passes at one temperature say about counting passes as independent evidence."""

    INDEPENDENT = "independent"  # the upper confidence bound is at most the threshold
    DEPENDENT = "dependent"  # the lower confidence bound is above the threshold
    INCONCLUSIVE = "inconclusive"  # the interval holds the threshold (or too few discordant
    #                                questions to trust it): more questions
    NO_EVIDENCE = "no evidence"  # no discordant pair: the texts never disagreed


@dataclass(frozen=True)
class QuestionDraws:
    """One question's four rollouts: text A (the baseline) and text B (the variant), two passes
    each (``a1``/``b1`` the first pass, ``a2``/``b2`` the second); True = correct."""

    a1: bool
    a2: bool
    b1: bool
    b2: bool


@dataclass(frozen=True)
class PassDependence:
    """The estimate of ρ_d over ``questions`` questions (see the module docstring).

    ``discordance`` = mean of d² over both passes, ``cross`` = mean of d₁·d₂; ``rho`` their ratio
    (None without a discordant pair) with a percentile bootstrap interval over questions
    (``ci_low``, ``ci_high``; None likewise); ``discordant_questions`` = questions with a
    discordant pair in either pass. ``agree_within`` = share of questions whose two
    passes of one text agree (both texts pooled), ``agree_across`` = share whose first passes of
    the two texts agree. ``icc_within`` = the correlation of one text's two passes around its own
    mean, averaged over the two texts (None when neither varies): how sharp the sampler is,
    including the questions' own spread of difficulty; context for ρ_d, not a bound on it (an
    edit that reverses a question's lean repeats more than the sampler does)."""

    questions: int
    discordant_questions: int
    accuracy_a: float
    accuracy_b: float
    discordance: float
    cross: float
    rho: float | None
    ci_low: float | None
    ci_high: float | None
    agree_within: float
    agree_across: float
    icc_within: float | None
    threshold: float
    verdict: PassVerdict


def _columns(draws: Sequence[QuestionDraws]) -> np.ndarray:
    return np.array([[d.a1, d.a2, d.b1, d.b2] for d in draws], dtype=np.float64).reshape(-1, 4)


def _moments(d1: np.ndarray, d2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E[d₁d₂], E[d²]) over the last axis: of the questions, or of each bootstrap resample."""
    return np.mean(d1 * d2, axis=-1), np.mean((d1 * d1 + d2 * d2) / 2.0, axis=-1)


def _pass_correlation(x1: np.ndarray, x2: np.ndarray) -> float | None:
    """The correlation of one text's two passes around that text's own mean (None when every
    answer of the text is the same)."""
    mu = float(np.mean(np.concatenate([x1, x2])))
    if not 0 < mu < 1:
        return None
    return (float(np.mean(x1 * x2)) - mu * mu) / (mu * (1 - mu))


def classify(
    rho: float | None,
    ci_low: float | None,
    ci_high: float | None,
    discordant_questions: int,
    threshold: float = MAX_PASS_DEPENDENCE,
) -> PassVerdict:
    """The verdict of an estimate against ``threshold`` (see :class:`PassVerdict`)."""
    if rho is None or ci_low is None or ci_high is None:
        return PassVerdict.NO_EVIDENCE
    if ci_low > threshold:
        return PassVerdict.DEPENDENT
    if ci_high <= threshold and discordant_questions >= MIN_DISCORDANT_QUESTIONS:
        return PassVerdict.INDEPENDENT
    return PassVerdict.INCONCLUSIVE


def estimate_pass_dependence(
    draws: Sequence[QuestionDraws],
    rng: np.random.Generator,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    threshold: float = MAX_PASS_DEPENDENCE,
) -> PassDependence:
    """ρ_d of ``draws`` with a bootstrap interval over questions (``rng`` draws the resamples).

    Resamples without a discordant pair have no ratio and are left out of the interval."""
    if not draws:
        raise ValueError("estimate_pass_dependence needs at least one question's draws")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    x = _columns(draws)
    a1, a2, b1, b2 = x.T
    d1, d2 = b1 - a1, b2 - a2
    cross, disc = (float(v) for v in _moments(d1, d2))
    rho = cross / disc if disc > 0 else None
    low = high = None
    if rho is not None:
        idx = rng.integers(0, len(draws), size=(resamples, len(draws)))
        num, den = _moments(d1[idx], d2[idx])
        ratios = num[den > 0] / den[den > 0]
        tail = (1.0 - CONFIDENCE) / 2.0
        low, high = (float(v) for v in np.quantile(ratios, [tail, 1.0 - tail]))
    discordant = int(np.count_nonzero((d1 != 0) | (d2 != 0)))
    iccs = [c for c in (_pass_correlation(a1, a2), _pass_correlation(b1, b2)) if c is not None]
    icc = sum(iccs) / len(iccs) if iccs else None
    return PassDependence(
        questions=len(draws),
        discordant_questions=discordant,
        accuracy_a=float(np.mean((a1 + a2) / 2.0)),
        accuracy_b=float(np.mean((b1 + b2) / 2.0)),
        discordance=disc,
        cross=cross,
        rho=rho,
        ci_low=low,
        ci_high=high,
        agree_within=float(np.mean(np.concatenate([a1 == a2, b1 == b2]))),
        agree_across=float(np.mean(a1 == b1)),
        icc_within=icc,
        threshold=threshold,
        verdict=classify(rho, low, high, discordant, threshold),
    )


def lowest_independent_temperature(verdicts: Sequence[tuple[float, PassVerdict]]) -> float | None:
    """The lowest probed temperature from which every probed temperature up is INDEPENDENT
    (the value ``gate_fresh_temperature`` may take), or None when the highest is not."""
    best: float | None = None
    for temperature, verdict in sorted(verdicts, reverse=True):
        if verdict is not PassVerdict.INDEPENDENT:
            break
        best = temperature
    return best
