"""Unit tests and properties of the gate kernel (GATE.md §2-§5)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.gate import (
    GateParams,
    GateState,
    PairResult,
    Verdict,
    chunk_plan,
    default_passes,
    gate_decision,
    gate_plan,
    gate_state_from_dict,
    gate_state_to_dict,
    horizon_log_threshold,
    log_mixture_e,
    log_sprt,
    mixture_grid,
    new_gate_state,
    pair_block,
    rejection_tag,
    sign_test_p,
    verdict_action,
)
from trm_assets.domain.quadrants import IMPROVED, REGRESSED


def block_of(
    w: int = 0,
    los: int = 0,
    ties: int = 0,
    infra_b: int = 0,
    infra_c: int = 0,
    attempted: int | None = None,
) -> PairResult:
    """A block with the given counts built through the real pair_block."""
    base: dict[str, bool | None] = {}
    cand: dict[str, bool | None] = {}
    i = 0
    for b, c, n in (
        (False, True, w),
        (True, False, los),
        (True, True, ties),
        (None, True, infra_b),
        (True, None, infra_c),
    ):
        for _ in range(n):
            base[f"q{i}"], cand[f"q{i}"] = b, c
            i += 1
    keys = list(base)
    att = len(keys) if attempted is None else attempted
    return pair_block(keys, base, cand, att, att)


# ------------------------------------------------------------------ evidence


def test_mixture_e_closed_form() -> None:
    grid = mixture_grid()
    assert grid[0] == pytest.approx(0.045) and grid[-1] == pytest.approx(0.9) and len(grid) == 20
    direct = sum((1 + lam) ** 7 * (1 - lam) ** 2 for lam in grid) / 20
    assert log_mixture_e(7, 2) == pytest.approx(math.log(direct), rel=1e-12)
    assert log_mixture_e(0, 0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        log_mixture_e(-1, 0)


@given(st.integers(0, 300), st.integers(0, 300))
def test_e_plus_monotone_in_w_and_l(w: int, los: int) -> None:
    assert log_mixture_e(w + 1, los) > log_mixture_e(w, los)
    assert log_mixture_e(w, los + 1) < log_mixture_e(w, los)


@given(st.integers(0, 60), st.integers(0, 60))
def test_sign_test_exact(w: int, los: int) -> None:
    n = w + los
    expected = 1.0 if n == 0 else sum(math.comb(n, k) for k in range(w, n + 1)) / 2**n
    assert sign_test_p(w, los) == pytest.approx(expected, rel=1e-12)
    assert sign_test_p(w + 1, los) <= sign_test_p(w, los)


def test_sign_test_known_values() -> None:
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(0, 5) == 1.0
    with pytest.raises(ValueError):
        sign_test_p(0, -1)


def test_sprt() -> None:
    assert log_sprt(3, 2) == pytest.approx(3 * math.log(1.4) + 2 * math.log(0.6))
    # expected discordant pairs to reach ln 0.1 at theta = 1/2 is about 26 (GATE §3.4)
    drift = 0.5 * math.log(1.4) + 0.5 * math.log(0.6)
    assert math.log(0.1) / drift == pytest.approx(26, abs=1.5)


# GATE §3.5 table: the infimum c of valid thresholds; our threshold is the smallest achievable
# E⁺ value above it, so the largest achievable value below ours must equal the table's figure.
@pytest.mark.parametrize(
    ("d", "alpha", "table"),
    [
        (10, 0.05, 7.4),
        (20, 0.05, 9.1),
        (50, 0.05, 11.0),
        (100, 0.05, 12.9),
        (150, 0.05, 14.6),
        (10, 0.10, 4.4),
        (20, 0.10, 5.6),
        (100, 0.10, 6.7),
        (150, 0.10, 7.0),
    ],
)
def test_horizon_threshold_matches_table(d: int, alpha: float, table: float) -> None:
    thr = horizon_log_threshold(d, alpha)
    below = max(
        v
        for n in range(1, d + 1)
        for w in range(n + 1)
        if (v := log_mixture_e(w, n - w)) < thr - 1e-12
    )
    assert math.exp(below) == pytest.approx(table, abs=0.06)
    assert thr <= math.log(1 / alpha) + 1e-12


def test_horizon_threshold_errors_and_cap() -> None:
    with pytest.raises(ValueError):
        horizon_log_threshold(0, 0.05)
    with pytest.raises(ValueError):
        horizon_log_threshold(10, 1.5)
    # d = 1: no achievable value has crossing probability <= alpha; fall back to ln(1/alpha)
    assert horizon_log_threshold(1, 0.05) == pytest.approx(math.log(20))


# ------------------------------------------------------------------ pairing


def test_pair_block_imputes_candidate_infra_and_drops_baseline_infra() -> None:
    base: dict[str, bool | None] = {"a": False, "b": True, "c": None, "d": True, "e": False}
    cand: dict[str, bool | None] = {"a": True, "b": None, "c": True, "d": True, "e": False}
    r = pair_block(["e", "d", "c", "b", "a"], base, cand, 3, 5)
    assert r.keys == ("e", "d", "c", "b", "a")
    assert r.signs == (0, 0, -1, 1)  # ladder order, "c" dropped
    assert (r.n_improved, r.n_regressed, r.n_persistent_fail, r.n_stable_success) == (1, 1, 1, 1)
    assert (r.n_infra_baseline, r.n_infra_candidate) == (1, 1)
    assert r.n_attempted == 8 and r.n_pairs == 4 and r.n_positions == 5 and r.n_ties == 2
    row_b = r.rows[3]
    assert row_b.candidate_imputed and row_b.quadrant == REGRESSED and row_b.sign == -1
    assert r.rows[2].sign is None and r.rows[2].quadrant is None
    assert r.rows[4].quadrant == IMPROVED


def test_pair_block_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="twice"):
        pair_block(["a", "a"], {"a": True}, {"a": True}, 0, 0)
    with pytest.raises(ValueError, match="lack"):
        pair_block(["a", "b"], {"a": True}, {"a": True, "b": True}, 0, 0)
    with pytest.raises(ValueError):
        pair_block(["a"], {"a": True}, {"a": True}, -1, 0)


def test_pair_block_keys_by_qid_and_rep() -> None:
    plan = gate_plan(["x", "y"], passes=2, block=10)
    assert plan == (("x", 0), ("y", 0), ("x", 1), ("y", 1))
    base = {k: k[1] == 0 for k in plan}
    cand = {k: True for k in plan}
    r = pair_block(plan, base, cand, 4, 4)
    assert r.n_improved == 2 and r.n_stable_success == 2


def test_plan_helpers() -> None:
    assert gate_plan(["a", "b", "c"], passes=1, block=2, max_blocks=1) == (("a", 0), ("b", 0))
    assert chunk_plan(list("abcde"), 2) == (("a", "b"), ("c", "d"), ("e",))
    assert default_passes(50) == 3 and default_passes(60) == 1
    for bad in ((0, 1, None), (1, 0, None), (1, 1, 0)):
        with pytest.raises(ValueError):
            gate_plan(["a"], *bad)
    with pytest.raises(ValueError):
        chunk_plan(["a"], 0)


# ------------------------------------------------------------------ decision


def test_params_validation() -> None:
    GateParams()
    bad = [
        {"alpha": 0.0},
        {"mode": "bayes"},
        {"alpha_early": 0.05},
        {"alpha_harm": 1.0},
        {"lambda0": 1.0},
        {"lambda_dir": 0.0},
        {"grid_k": 4},
        {"grid_max": 1.0},
        {"block": 0},
        {"infra_max_rate": 0.0},
        {"infra_min_denominator": 9},
    ]
    for kwargs in bad:
        with pytest.raises(ValueError, match="invalid GateParams"):
            GateParams(**kwargs)  # type: ignore[arg-type]
    assert GateParams().alpha_final == pytest.approx(0.04)


def test_accept_early_at_e_plus_100() -> None:
    p = GateParams()
    s = new_gate_state(100, p)
    v = gate_decision(s, block_of(w=8, los=1, ties=1), p)
    assert v.verdict is Verdict.CONTINUE and v.log_e_plus < math.log(100)
    v = gate_decision(s, block_of(w=5, ties=5), p)
    assert v.log_e_plus >= math.log(100) and v.verdict is Verdict.ACCEPT
    assert v.action == "accept" and s.terminal is Verdict.ACCEPT and len(s.history) == 2
    with pytest.raises(ValueError, match="already ended"):
        gate_decision(s, block_of(w=1), p)


def test_hybrid_final_sign_test_route() -> None:
    p = GateParams()
    # W=14, L=4: sign-test p = 0.0154 <= 0.04 but E+ < 100: accepted only at the last block.
    assert sign_test_p(14, 4) <= 0.04 and log_mixture_e(14, 4) < math.log(100)
    s = new_gate_state(20, p)
    assert gate_decision(s, block_of(w=7, los=2, ties=1), p).verdict is Verdict.CONTINUE
    v = gate_decision(s, block_of(w=7, los=2, ties=1), p)
    assert v.last and v.verdict is Verdict.ACCEPT
    # same data in anytime mode: budget exhausted without evidence
    pa = GateParams(mode="anytime")
    s = new_gate_state(20, pa)
    gate_decision(s, block_of(w=7, los=2, ties=1), pa)
    assert gate_decision(s, block_of(w=7, los=2, ties=1), pa).verdict is Verdict.REJECT_BUDGET


def test_horizon_mode_uses_exact_threshold() -> None:
    p = GateParams(mode="horizon")
    s = new_gate_state(10, p)
    assert s.log_thr_horizon == pytest.approx(horizon_log_threshold(10, 0.05))
    v = gate_decision(s, block_of(w=6, ties=4), p)
    assert s.log_thr_horizon is not None
    assert v.log_e_plus >= s.log_thr_horizon and v.verdict is Verdict.ACCEPT
    assert v.log_e_plus < math.log(20)  # would not pass the anytime threshold
    # a state restored without the cached threshold recomputes it
    s2 = GateState(d_max=10)
    assert gate_decision(s2, block_of(w=6, ties=4), p).verdict is Verdict.ACCEPT


def test_reject_harm_dir_futile_budget() -> None:
    p = GateParams()
    s = new_gate_state(100, p)
    v = gate_decision(s, block_of(los=10), p)
    assert v.log_e_minus >= math.log(10) and v.verdict is Verdict.REJECT_HARM
    assert v.action == "reject" and rejection_tag(v.verdict) == "verified_harmful"
    # Λ ≤ ln 0.1 without E- ≥ 10: direction rejection
    s = new_gate_state(100, p)
    v = gate_decision(s, block_of(w=3, los=7), p)
    assert v.log_sprt <= math.log(0.1) and v.log_e_minus < math.log(10)
    assert v.verdict is Verdict.REJECT_DIR and rejection_tag(v.verdict) == "not_verified"
    # futility: no continuation can reach ACCEPT
    s = new_gate_state(12, p)
    v = gate_decision(s, block_of(w=1, los=2, ties=7), p)
    assert not v.reachable and v.verdict is Verdict.REJECT_FUTILE
    # budget: last block, no evidence either way
    s = new_gate_state(10, p)
    v = gate_decision(s, block_of(w=2, los=2, ties=6), p)
    assert v.last and v.verdict is Verdict.REJECT_BUDGET


def test_infra_guard_first_and_denominator() -> None:
    p = GateParams()
    # 5 infra of 20 attempted (both arms) = 25% > 20%, with a winning block: INFRA comes first
    s = new_gate_state(100, p)
    v = gate_decision(s, block_of(w=5, infra_b=5), p)
    assert v.infra == 5 and v.verdict is Verdict.INFRA and v.action == "abort"
    # cache hits are excluded: the same failures with few attempts do not reach the denominator
    s = new_gate_state(100, p)
    v = gate_decision(s, block_of(w=2, infra_b=2, attempted=2), p)
    assert v.attempted == 4 and v.verdict is Verdict.CONTINUE
    # candidate-only failures are flagged as suspect but imputed and decided on
    s = new_gate_state(100, p)
    v = gate_decision(s, block_of(w=4, ties=4, infra_c=2), p)
    assert v.candidate_infra_suspect and v.verdict is Verdict.CONTINUE
    assert v.infra_rate == pytest.approx(2 / 20)


def test_block_guards() -> None:
    p = GateParams(block=5)
    s = new_gate_state(8, p)
    with pytest.raises(ValueError, match="gate_block"):
        gate_decision(s, block_of(ties=6), p)
    assert gate_decision(s, block_of(w=5), p).verdict is Verdict.CONTINUE
    with pytest.raises(ValueError, match="d_max"):
        gate_decision(s, block_of(ties=4), p)
    with pytest.raises(ValueError, match="empty"):
        gate_decision(s, pair_block([], {}, {}, 0, 0), p)
    with pytest.raises(ValueError):
        new_gate_state(0, p)


def reference_verdict(w: int, los: int, rem: int, attempted: int, infra: int, mode: str) -> Verdict:
    """An independent transcription of GATE §4.2 with plain sums (oracle for the property)."""
    grid = [0.9 * k / 20 for k in range(1, 21)]

    def e(a: int, b: int) -> float:
        return sum((1 + x) ** a * (1 - x) ** b for x in grid) / 20

    def pval(a: int, b: int) -> float:
        n = a + b
        return 1.0 if n == 0 else sum(math.comb(n, k) for k in range(a, n + 1)) / 2**n

    last = rem == 0
    if mode == "hybrid":
        accept = e(w, los) >= 100 or (last and pval(w, los) <= 0.04)
        reach = e(w + rem, los) >= 100 or pval(w + rem, los) <= 0.04
    else:
        accept = e(w, los) >= 20
        reach = e(w + rem, los) >= 20
    if attempted >= 10 and infra / attempted > 0.2:
        return Verdict.INFRA
    if accept:
        return Verdict.ACCEPT
    if e(los, w) >= 10:
        return Verdict.REJECT_HARM
    if w * math.log(1.4) + los * math.log(0.6) <= math.log(0.1):
        return Verdict.REJECT_DIR
    if last:
        return Verdict.REJECT_BUDGET
    if not reach:
        return Verdict.REJECT_FUTILE
    return Verdict.CONTINUE


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10),
    st.integers(0, 10),
    st.integers(0, 10),
    st.integers(0, 5),
    st.integers(0, 60),
    st.sampled_from(["hybrid", "anytime"]),
)
def test_verdict_precedence_matches_reference(
    w: int, los: int, ties: int, infra_b: int, extra: int, mode: str
) -> None:
    n = w + los + ties + infra_b
    if n == 0:
        return
    p = GateParams(mode=mode, block=max(n, 1))  # type: ignore[arg-type]
    s = new_gate_state(n + extra, p)
    v = gate_decision(s, block_of(w=w, los=los, ties=ties, infra_b=infra_b), p)
    assert v.verdict is reference_verdict(w, los, extra, 2 * n, infra_b, mode)


def test_verdict_action_and_tag() -> None:
    assert verdict_action(Verdict.CONTINUE) == "continue"
    assert verdict_action(Verdict.REJECT_BUDGET) == "reject"
    with pytest.raises(ValueError, match="not a rejection"):
        rejection_tag(Verdict.ACCEPT)


# ------------------------------------------------------------------ checkpoint


def test_gate_state_round_trip_continues_identically() -> None:
    p = GateParams(mode="horizon")
    s = new_gate_state(30, p)
    gate_decision(s, block_of(w=3, los=2, ties=4, infra_c=1), p)
    data = gate_state_to_dict(s, p)
    assert all(isinstance(data[k], int) for k in ("wins", "losses", "positions", "d_max"))
    restored = gate_state_from_dict(data, p)
    assert restored.wins == 3 and restored.positions == 10 and restored.terminal is None
    assert restored.log_thr_horizon == s.log_thr_horizon
    a = gate_decision(s, block_of(w=5, ties=5), p)
    b = gate_decision(restored, block_of(w=5, ties=5), p)
    assert a == b


def test_gate_state_refuses_invalid() -> None:
    p = GateParams()
    s = new_gate_state(30, p)
    gate_decision(s, block_of(los=10), p)
    good = gate_state_to_dict(s, p)
    assert gate_state_from_dict(good, p).terminal is Verdict.REJECT_HARM
    with pytest.raises(DataFormatError, match="format"):
        gate_state_from_dict({**good, "format": "trm.gate_state/0"}, p)
    with pytest.raises(DataFormatError, match="wins"):
        gate_state_from_dict({**good, "wins": 1.5}, p)
    with pytest.raises(DataFormatError, match="terminal"):
        gate_state_from_dict({**good, "terminal": "MAYBE"}, p)
    with pytest.raises(DataFormatError, match="params"):
        gate_state_from_dict(good, GateParams(alpha=0.1, alpha_early=0.02))
    with pytest.raises(DataFormatError, match="fingerprint"):
        gate_state_from_dict({**good, "losses": 3}, p)
    with pytest.raises(DataFormatError, match="positions"):
        gate_state_from_dict({**good, "positions": 31}, p)


def test_a_block_whose_counts_disagree_with_its_signs_is_refused_before_any_state() -> None:
    """Review: a hand-built block with 1 tie and ``n_improved = 9`` was decided on (E⁺ 4.34), and
    one with negative losses changed the gate state before it raised."""
    from dataclasses import replace as dc_replace

    p = GateParams()
    good = pair_block(
        ["a", "b", "c"], {"a": False, "b": True, "c": None}, {"a": True, "b": True, "c": True}, 3, 3
    )
    assert (good.n_improved, good.n_ties, good.n_positions, good.n_pairs) == (1, 1, 3, 2)
    for bad in (
        {"n_improved": 9},
        {"n_regressed": -2},
        {"n_infra_baseline": 0},
        {"signs": (2, 0)},
        {"candidate_attempted": -1},
        # review: the audit rows and the infra counts were not checked against the block
        {"n_infra_candidate": 5, "rows": ()},
        {"n_infra_candidate": 1},
        {"rows": good.rows[::-1]},
    ):
        with pytest.raises(ValueError):
            dc_replace(good, **bad)
    s = new_gate_state(10, p)
    assert gate_decision(s, good, p).verdict is Verdict.CONTINUE
    assert (s.wins, s.losses, s.positions) == (1, 0, 3)
