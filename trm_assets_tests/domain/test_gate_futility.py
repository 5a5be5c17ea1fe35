"""Stochastic curtailment (``futility_power``) and the two-stage screen (``screen_positions``):
each only ever turns a CONTINUE into a REJECT_FUTILE, so on the same outcomes it never accepts
where the plain gate rejects, and it stops null candidates earlier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_assets.domain.gate import (
    GateParams,
    Verdict,
    chunk_plan,
    conditional_power,
    gate_decision,
    gate_plan,
    new_gate_state,
    pair_block,
)

Position = tuple[str, int]  # (qid, rep)


def _run(
    plan: Sequence[Position],
    base: Mapping[Position, bool | None],
    cand: Mapping[Position, bool | None],
    params: GateParams,
) -> tuple[Verdict, int]:
    state = new_gate_state(len(plan), params)
    for chunk in chunk_plan(plan, params.block):
        v = gate_decision(state, pair_block(chunk, base, cand, len(chunk), len(chunk)), params)
        if v.verdict is not Verdict.CONTINUE:
            return v.verdict, state.positions
    raise AssertionError("the last block decides")


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(5, 60),
    effect=st.floats(-0.3, 0.4),
    gamma=st.sampled_from([0.0, 0.05, 0.2, 0.5]),
    screen=st.sampled_from([0, 7, 20, 50]),
)
def test_curtailment_never_accepts_what_the_plain_gate_rejects(
    seed: int, n: int, effect: float, gamma: float, screen: int
) -> None:
    """Neither stop (conditional power, the two-stage screen) accepts what the plain gate does
    not, nor changes a verdict other than by stopping earlier with REJECT_FUTILE."""
    rng = np.random.default_rng(seed)
    qs = [f"q{i}" for i in range(n)]
    plan = gate_plan(qs, 2, 10)
    pb = rng.uniform(0.1, 0.9, n)
    pc = np.clip(pb + effect, 0, 1)
    base = {(q, r): bool(rng.random() < pb[i]) for r in range(2) for i, q in enumerate(qs)}
    cand = {(q, r): bool(rng.random() < pc[i]) for r in range(2) for i, q in enumerate(qs)}
    plain, plain_pos = _run(plan, base, cand, GateParams(block=10))
    cut, cut_pos = _run(
        plan, base, cand, GateParams(block=10, futility_power=gamma, screen_positions=screen)
    )
    assert cut_pos <= plain_pos
    if cut is Verdict.ACCEPT:
        assert plain is Verdict.ACCEPT and cut_pos == plain_pos
    if cut is not Verdict.REJECT_FUTILE:
        assert (cut, cut_pos) == (plain, plain_pos)


def test_conditional_power_bounds_and_monotonicity() -> None:
    p = GateParams(block=10)
    thr = np.log(1 / p.alpha_early)
    assert conditional_power(3, 1, 10, 0, p, thr) == 0.0
    # more wins so far, same pairs: more power; a hopeless position: (almost) none
    cps = [conditional_power(w, 10 - w, 30, 40, p, thr) for w in range(11)]
    assert all(0.0 <= c <= 1.0 for c in cps)
    assert cps == sorted(cps) and cps[-1] > 0.9 and cps[0] < 0.05


def test_curtailment_stops_null_candidates_earlier_at_the_same_error_rate() -> None:
    rng = np.random.default_rng(11)
    n, passes, reps = 50, 3, 200
    qs = [f"q{i}" for i in range(n)]
    plan = gate_plan(qs, passes, 10)
    res = {}
    for gamma in (0.0, 0.3):
        params = GateParams(block=10, futility_power=gamma)
        r2 = np.random.default_rng(5)
        acc = pos = 0
        for _ in range(reps):
            pb = r2.uniform(0.2, 0.8, n)
            pos_ = [(q, r, i) for r in range(passes) for i, q in enumerate(qs)]
            base = {(q, r): bool(r2.random() < pb[i]) for q, r, i in pos_}
            cand = {(q, r): bool(r2.random() < pb[i]) for q, r, i in pos_}
            v, k = _run(plan, base, cand, params)
            acc += v is Verdict.ACCEPT
            pos += k
        res[gamma] = (acc, pos)
    del rng
    assert res[0.3][0] <= res[0.0][0]
    assert res[0.3][1] < res[0.0][1]


def test_the_screen_stops_at_its_boundary_unless_the_candidate_is_ahead() -> None:
    plan = gate_plan([f"q{i}" for i in range(40)], 1, 10)
    params = GateParams(block=10, screen_positions=20)
    base = {p: False for p in plan}
    ahead = {p: i in (3, 25) for i, p in enumerate(plan)}  # one win before position 20
    even = {p: False for p in plan}
    v, pos = _run(plan, base, even, params)
    assert (v, pos) == (Verdict.REJECT_FUTILE, 20)  # W - L = 0 < 1 at the boundary
    v, pos = _run(plan, base, ahead, params)
    assert pos == 40  # W - L = 1 at the boundary: on to the end
