"""The estimate of how much a second gate pass replays the first (ρ_d = E[d₁d₂]/E[d²])."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_assets.domain.pass_dependence import (
    INDEPENDENT_MAX_CORRELATION,
    MAX_PASS_DEPENDENCE,
    MIN_DISCORDANT_QUESTIONS,
    PassVerdict,
    QuestionDraws,
    classify,
    estimate_pass_dependence,
    lowest_independent_temperature,
)

draws_st = st.lists(st.tuples(*[st.booleans()] * 4).map(lambda t: QuestionDraws(*t)), min_size=1)


def test_threshold_is_the_worst_case_rho_at_latent_correlation_a_quarter() -> None:
    # p = 1/2 on both arms, texts independent: Cov(a1, a2) = arcsin(r)/(2π), Var(d) = 1/2
    assert (
        pytest.approx(2 * math.asin(INDEPENDENT_MAX_CORRELATION) / math.pi) == MAX_PASS_DEPENDENCE
    )
    assert pytest.approx(0.1609, abs=1e-4) == MAX_PASS_DEPENDENCE


def test_a_replayed_pass_is_fully_dependent() -> None:
    # every question's second pass repeats its first: d1 = d2
    rows = [QuestionDraws(a, a, b, b) for a, b in [(True, False), (False, True), (True, True)] * 20]
    est = estimate_pass_dependence(rows, np.random.default_rng(0))
    assert est.rho == 1.0 and est.cross == est.discordance == pytest.approx(40 / 60)
    assert est.verdict is PassVerdict.DEPENDENT
    assert est.agree_within == 1.0 and est.agree_across == pytest.approx(20 / 60)


def test_hand_computed_values() -> None:
    rows = [
        QuestionDraws(True, False, False, True),  # d = (−1, +1): cross −1, d² = 1
        QuestionDraws(False, False, True, True),  # d = (+1, +1): cross +1
        QuestionDraws(True, True, True, False),  # d = (0, −1): cross 0, d² mean 1/2
        QuestionDraws(True, True, True, True),  # concordant
    ]
    est = estimate_pass_dependence(rows, np.random.default_rng(1), resamples=50)
    assert est.cross == 0.0
    assert est.discordance == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert est.rho == 0.0
    assert est.accuracy_a == pytest.approx(5 / 8) and est.accuracy_b == pytest.approx(6 / 8)


def test_no_discordant_pair_is_no_evidence() -> None:
    est = estimate_pass_dependence(
        [QuestionDraws(True, True, True, True)] * 5, np.random.default_rng(0)
    )
    assert est.rho is None and est.ci_high is None and est.verdict is PassVerdict.NO_EVIDENCE


@settings(max_examples=200, deadline=None)
@given(draws_st)
def test_swapping_passes_or_texts_leaves_the_estimate_unchanged(rows: list[QuestionDraws]) -> None:
    est = estimate_pass_dependence(rows, np.random.default_rng(3), resamples=20)
    passes = estimate_pass_dependence(
        [QuestionDraws(r.a2, r.a1, r.b2, r.b1) for r in rows],
        np.random.default_rng(3),
        resamples=20,
    )
    texts = estimate_pass_dependence(
        [QuestionDraws(r.b1, r.b2, r.a1, r.a2) for r in rows],
        np.random.default_rng(3),
        resamples=20,
    )
    assert passes.rho == est.rho == texts.rho
    if est.rho is not None:
        assert -1.0 <= est.rho <= 1.0
        assert est.ci_low is not None and est.ci_high is not None and est.ci_low <= est.ci_high


def test_the_interval_covers_the_true_value() -> None:
    """Independent draws given per-question probabilities that differ between the texts:
    ρ_d = mean((p_b − p_a)²) / mean(p_a + p_b − 2·p_a·p_b), computed here in closed form."""
    rng = np.random.default_rng(7)
    n, reps, covered = 300, 200, 0
    for _ in range(reps):
        p_a = rng.uniform(0.15, 0.85, n)
        p_b = np.clip(p_a + rng.choice([-0.3, 0.3], n) * (rng.random(n) < 0.5), 0, 1)
        truth = np.mean((p_b - p_a) ** 2) / np.mean(p_a + p_b - 2 * p_a * p_b)
        a = rng.random((2, n)) < p_a
        b = rng.random((2, n)) < p_b
        rows = [QuestionDraws(*map(bool, (a[0, i], a[1, i], b[0, i], b[1, i]))) for i in range(n)]
        est = estimate_pass_dependence(rows, rng, resamples=400)
        assert est.ci_low is not None and est.ci_high is not None
        covered += est.ci_low <= truth <= est.ci_high
    assert covered / reps >= 0.90, covered


def test_classify_and_the_recommended_temperature() -> None:
    t, enough = MAX_PASS_DEPENDENCE, MIN_DISCORDANT_QUESTIONS
    assert classify(0.05, -0.02, t, enough) is PassVerdict.INDEPENDENT
    assert classify(0.05, -0.02, t, enough - 1) is PassVerdict.INCONCLUSIVE  # too few to trust
    assert classify(0.05, -0.02, t + 0.01, enough) is PassVerdict.INCONCLUSIVE
    # a point above the threshold is not enough to call it dependent: the interval must be
    assert classify(t + 0.01, t - 0.01, t + 0.2, enough) is PassVerdict.INCONCLUSIVE
    assert classify(t + 0.1, t + 0.01, t + 0.2, 3) is PassVerdict.DEPENDENT
    assert classify(None, None, None, 0) is PassVerdict.NO_EVIDENCE
    i, d, n = PassVerdict.INDEPENDENT, PassVerdict.DEPENDENT, PassVerdict.INCONCLUSIVE
    assert lowest_independent_temperature([(0.3, d), (0.7, i), (1.0, i)]) == 0.7
    # a dependent temperature above an independent one cuts the range off there
    assert lowest_independent_temperature([(0.3, i), (0.7, n), (1.0, i)]) == 1.0
    assert lowest_independent_temperature([(0.3, i), (1.0, d)]) is None
    assert lowest_independent_temperature([]) is None


def _worst_case_rows(
    rng: np.random.Generator, live: int, dead: int, r: float
) -> list[QuestionDraws]:
    """GATE §10.2's worst case at latent correlation ``r`` on ``live`` questions (p = ½, the
    texts independent: ρ_d = 2·arcsin(r)/π) and ``dead`` questions both texts always answer."""
    za, zb = rng.standard_normal(live), rng.standard_normal(live)
    a = [math.sqrt(r) * za + math.sqrt(1 - r) * rng.standard_normal(live) < 0 for _ in range(2)]
    b = [math.sqrt(r) * zb + math.sqrt(1 - r) * rng.standard_normal(live) < 0 for _ in range(2)]
    rows = [QuestionDraws(*map(bool, (a[0][i], a[1][i], b[0][i], b[1][i]))) for i in range(live)]
    return rows + [QuestionDraws(True, True, True, True)] * dead


@pytest.mark.parametrize("live", [10, 60, 200])
def test_at_the_threshold_few_probes_call_it_independent(live: int) -> None:
    """At ρ_d = the threshold, "independent" is a false verdict: the rule keeps it near the
    interval's 2.5% whatever the number of questions that ever disagree (with 10 such questions
    the percentile interval alone said so in 14% of probes)."""
    rng = np.random.default_rng(live)
    reps, wrong = 300, 0
    for _ in range(reps):
        est = estimate_pass_dependence(
            _worst_case_rows(rng, live, 50, INDEPENDENT_MAX_CORRELATION), rng, resamples=400
        )
        wrong += est.verdict is PassVerdict.INDEPENDENT
    assert wrong / reps <= 0.05, wrong


def test_a_replay_at_half_correlation_is_called_dependent_with_enough_questions() -> None:
    rng = np.random.default_rng(3)
    est = estimate_pass_dependence(_worst_case_rows(rng, 600, 0, 0.5), rng, resamples=400)
    assert est.rho is not None and abs(est.rho - 2 * math.asin(0.5) / math.pi) < 0.13  # 3 SD
    assert est.verdict is PassVerdict.DEPENDENT


def test_icc_within_is_each_text_s_own_pass_correlation() -> None:
    """In the worst case (texts independent, p = ½) ρ_d and the one-text correlation agree; a
    replay has it at 1; fresh draws have it near 0 even when the texts' accuracies differ (each
    text around its own mean: pooled, a 0.3 gap alone gave 0.10)."""
    rng = np.random.default_rng(9)
    est = estimate_pass_dependence(_worst_case_rows(rng, 4000, 0, 0.5), rng, resamples=50)
    assert est.rho is not None and est.icc_within is not None
    assert abs(est.icc_within - est.rho) < 0.05 and abs(est.rho - 1 / 3) < 0.05
    rows = [QuestionDraws(a, a, b, b) for a, b in [(True, False), (False, True), (True, True)] * 9]
    replay = estimate_pass_dependence(rows, rng, resamples=50)
    assert replay.icc_within == pytest.approx(1.0)
    a = rng.random((2, 4000)) < 0.7
    b = rng.random((2, 4000)) < 0.4
    fresh = estimate_pass_dependence(
        [QuestionDraws(*map(bool, (a[0, i], a[1, i], b[0, i], b[1, i]))) for i in range(4000)],
        rng,
        resamples=50,
    )
    assert fresh.icc_within is not None and abs(fresh.icc_within) < 0.04
    assert estimate_pass_dependence([QuestionDraws(True, True, True, True)], rng).icc_within is None
