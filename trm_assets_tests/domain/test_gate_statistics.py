"""Fast statistical checks of the real gate (GATE.md §10.2, §10.4/§6.3 R1).

Replicates are drawn with numpy; every decision goes through the real ``pair_block`` and
``gate_decision``. Seeds are fixed, so the results are deterministic; the bounds are the ones the
design asks for (≤ α + 3 SE), so a wrong threshold or a leaky rule makes them fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from trm_assets.domain.baseline_cache import (
    GATE_BASELINE,
    LADDER_DRAW,
    BaselineKey,
    ProvenanceError,
    check_servable,
    make_entry,
)
from trm_assets.domain.gate import (
    GateParams,
    Verdict,
    chunk_plan,
    gate_decision,
    gate_plan,
    new_gate_state,
    pair_block,
)
from trm_assets.domain.ladder import LadderParams, ladder_for, new_ladder, update_ladder
from trm_bench.gate import near_replay_accepts

REPLICATES = 5000


def run_gate(
    plan: list[str], base: dict[str, bool | None], cand: dict[str, bool | None], params: GateParams
) -> bool:
    state = new_gate_state(len(plan), params)
    for chunk in chunk_plan(plan, params.block):
        verdict = gate_decision(state, pair_block(chunk, base, cand, 0, len(chunk)), params).verdict
        if verdict is not Verdict.CONTINUE:
            return verdict is Verdict.ACCEPT
    raise AssertionError("no final verdict")


def worst_case_accept_rate(params: GateParams, n: int, replicates: int, seed: int) -> float:
    """Every question at p_B = p_C = ½ (ψ = ½), N = n, all questions visited (GATE §10.2)."""
    rng = np.random.default_rng(seed)
    plan = [f"q{i}" for i in range(n)]
    b = rng.random((replicates, n)) < 0.5
    c = rng.random((replicates, n)) < 0.5
    accepts = 0
    for r in range(replicates):
        accepts += run_gate(
            plan,
            dict(zip(plan, b[r].tolist(), strict=True)),
            dict(zip(plan, c[r].tolist(), strict=True)),
            params,
        )
    return accepts / replicates


@pytest.mark.parametrize(
    ("params", "design_rate"),
    [
        (GateParams(mode="hybrid", block=1), 0.027),
        (GateParams(mode="hybrid", block=10), None),
        (GateParams(mode="horizon", block=10), 0.026),
        (GateParams(mode="horizon", block=1), 0.043),
        (GateParams(mode="anytime", block=10), 0.017),
        (GateParams(mode="hybrid", alpha=0.10, alpha_early=0.02, block=1), 0.047),
    ],
    ids=["hybrid-b1", "hybrid-b10", "horizon-b10", "horizon-b1", "anytime-b10", "hybrid-a10-b1"],
)
def test_worst_case_false_accepts_within_alpha(
    params: GateParams, design_rate: float | None
) -> None:
    rate = worst_case_accept_rate(params, n=150, replicates=REPLICATES, seed=11)
    se = math.sqrt(params.alpha * (1 - params.alpha) / REPLICATES)
    assert rate <= params.alpha + 3 * se
    if design_rate is not None:  # and it reproduces the §10.2 table within Monte-Carlo error
        se_design = math.sqrt(design_rate * (1 - design_rate) / REPLICATES)
        assert abs(rate - design_rate) <= 4 * se_design + 0.002


# ------------------------------------------------------------------ GATE §6.3 R1


def test_cache_entry_from_the_ladder_draw_is_refused() -> None:
    key = BaselineKey("Counting Problem", "sha", "p1", "q1", 0)
    with pytest.raises(ProvenanceError, match="R1"):
        make_entry(key, False, provenance=LADDER_DRAW, run_id="run_e1_s1")
    # even a mislabelled entry from a run that built the ladder is refused
    entry = make_entry(key, False, provenance=GATE_BASELINE, run_id="run_gate_e1_s1_x")
    assert entry is not None
    with pytest.raises(ProvenanceError, match="built the ladder"):
        check_servable(entry, ladder_run_ids=["run_gate_e1_s1_x"])


def _cold_ladder_gate(n: int, reps: int, *, reuse_ladder_draw: bool, seed: int) -> float:
    """Identical candidate on a cold ladder (GATE §10.4 row 1), anytime mode, N = n."""
    rng = np.random.default_rng(seed)
    params = GateParams(mode="anytime")
    accepts = 0
    qids = [f"q{i:03d}" for i in range(n)]
    for _ in range(reps):
        p = np.clip(rng.beta(0.6, 0.5, size=n), 1e-9, 1 - 1e-9)
        draw = rng.random(n) < p  # the draw that builds the ladder
        ladder = update_ladder(
            new_ladder(dict.fromkeys(qids, "T"), LadderParams()),
            "run_e0_s0",
            dict(zip(qids, draw.tolist(), strict=True)),
        )
        order = ladder_for(ladder, "T", warm=False)
        idx = {q: i for i, q in enumerate(qids)}
        plan = [q for q, _ in gate_plan(order, 1, params.block)]
        fresh_b = rng.random(n) < p
        cand_draw = rng.random(n) < p  # identical candidate: same pass rates
        b_src = draw if reuse_ladder_draw else fresh_b
        base = {q: bool(b_src[idx[q]]) for q in plan}
        cand = {q: bool(cand_draw[idx[q]]) for q in plan}
        accepts += run_gate(plan, base, cand, params)  # type: ignore[arg-type]  # (q, pass) keys
    return accepts / reps


def test_reusing_the_ladder_draw_inflates_false_accepts() -> None:
    """Why R1 exists: with the ladder draw as baseline an identical candidate is accepted far
    above α (GATE: 1.8% → 34% at N = 150); with a fresh baseline it stays within α."""
    reps = 600
    leaky = _cold_ladder_gate(150, reps, reuse_ladder_draw=True, seed=3)
    fresh = _cold_ladder_gate(150, reps, reuse_ladder_draw=False, seed=3)
    assert leaky > 0.20
    assert fresh <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


# ------------------------------------------------------------------ a low temperature


def _near_replay_rate(r: float, passes: int, replicates: int, seed: int) -> float:
    """Least favourable null at a low temperature (docs/decision-low-temperature.md), N = 50:
    the bench's own simulation (``trm bench gate --worst-case``), through the real kernel."""
    params = GateParams(mode="hybrid", block=10)
    rng = np.random.default_rng(seed)
    return near_replay_accepts(50, passes, r, replicates, rng, params) / replicates


def test_near_replayed_passes_break_alpha_and_one_pass_does_not() -> None:
    """Why ``gate_fresh_temperature`` exists: at latent correlation r = 0.9 between two draws of
    one prompt (the simulator's exp(−(T/τ)²) at T = 0.16, τ = 0.5) three passes count near-replays
    as evidence and accept a worst-case null far above α; the plan below the threshold (one
    uniform pass) stays within α + 3 SE."""
    reps = 1500
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    assert _near_replay_rate(0.9, 3, reps, seed=5) > bound + 0.03
    assert _near_replay_rate(0.9, 1, reps, seed=6) <= bound


def test_text_shifts_at_an_extreme_pass_rate_break_alpha_with_passes() -> None:
    """Why any ``sim.text_flip_rate`` > 0 is refused at fresh temperatures (review of a3ca453):
    at p = 0.92 and the shipped f = 0.15 the simulator's text-to-text correlation is 0, every
    draw of a text repeats, and three passes accept a neutral rewording far above α (≈ 15%);
    one uniform pass stays within α + 3 SE. The bench's own simulation, the real kernel."""
    from trm_assets.llm.sim.decoding import flip_correlation
    from trm_bench.gate import text_shift_accepts

    assert flip_correlation(0.92, 0.15) == 0.0
    reps = 1000
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    params = GateParams(mode="hybrid", block=10)
    three = text_shift_accepts(50, 3, 0.92, 0.15, reps, np.random.default_rng(7), params)
    one = text_shift_accepts(50, 1, 0.92, 0.15, reps, np.random.default_rng(8), params)
    assert three / reps > bound + 0.05
    assert one / reps <= bound


def test_a_ladder_read_from_a_text_shifted_baseline_breaks_alpha_at_one_pass() -> None:
    """Why a real endpoint never takes the ladder's order (twenty-fourth session): with text
    shifts, p̂ read from six earlier draws of the baseline text (the real ``update_ladder`` and
    ``warm_order``) keeps the questions that text happened to do worse on, and a neutral
    rewording regresses to the mean there: one pass with fresh draws accepts it far above α
    (≈ 12% at p = 0.75, f = 0.3). The whole pool in a uniform order stays within α + 2 SE."""
    from trm_bench.gate import ladder_shift_accepts

    reps = 1000
    bound = 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)
    params = GateParams(mode="hybrid", block=10)
    ladder = ladder_shift_accepts(50, 0.75, 0.3, 6, True, reps, np.random.default_rng(7), params)
    uniform = ladder_shift_accepts(50, 0.75, 0.3, 6, False, reps, np.random.default_rng(8), params)
    assert ladder / reps > bound + 0.04
    assert uniform / reps <= bound
