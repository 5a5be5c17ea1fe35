"""Run-level error policies (GATE §6.4, §11)."""

from __future__ import annotations

import math

import pytest

from trm_assets.domain.gate import GateParams
from trm_assets.domain.run_level import (
    RunErrorParams,
    expected_false_accepts_bound,
    gate_params_for,
    lond_gamma,
)


def test_lond_gamma_normalised_over_horizon() -> None:
    gammas = [lond_gamma(j, 200) for j in range(1, 201)]
    assert math.fsum(gammas) == pytest.approx(1.0)
    assert all(g > 0 for g in gammas)
    assert gammas[1] > gammas[-1]  # front-loaded after the first gate
    with pytest.raises(ValueError):
        lond_gamma(0, 10)
    with pytest.raises(ValueError):
        lond_gamma(11, 10)


def test_policies() -> None:
    base = GateParams()
    assert gate_params_for(3, 0, base, RunErrorParams(max_gates=10)) is base
    pfer = gate_params_for(
        1, 0, base, RunErrorParams(policy="pfer", pfer_budget=1.0, max_gates=200)
    )
    assert pfer.alpha == pytest.approx(0.005) and pfer.alpha_early == pytest.approx(0.001)
    assert pfer.mode == "hybrid" and pfer.block == base.block
    anytime = GateParams(mode="anytime")
    run = RunErrorParams(policy="elond", fdr_alpha=0.10, max_gates=50)
    a0 = gate_params_for(5, 0, anytime, run).alpha
    a2 = gate_params_for(5, 2, anytime, run).alpha
    assert a0 == pytest.approx(0.10 * lond_gamma(5, 50)) and a2 == pytest.approx(3 * a0)
    with pytest.raises(ValueError, match="anytime"):
        gate_params_for(1, 0, base, run)
    with pytest.raises(ValueError, match="run_max_gates"):
        gate_params_for(51, 0, anytime, run)
    with pytest.raises(ValueError):
        gate_params_for(1, -1, anytime, run)
    assert expected_false_accepts_bound([0.05] * 200) == pytest.approx(10.0)


def test_run_params_validation() -> None:
    with pytest.raises(ValueError):
        RunErrorParams(policy="bonferroni")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RunErrorParams(pfer_budget=0)
    with pytest.raises(ValueError):
        RunErrorParams(max_gates=0)


@pytest.mark.parametrize("policy", ["pfer", "elond"])
def test_a_run_policy_changes_only_the_levels_of_a_gate(policy: str) -> None:
    """Review: ``pfer`` and ``elond`` rebuilt the gate's parameters field by field and dropped
    ``futility_power`` and the screen; every field but α and α₁ is the configured one."""
    from dataclasses import asdict

    base = GateParams(
        mode="anytime", futility_power=0.2, screen_positions=7, screen_margin=2, block=5
    )
    run = RunErrorParams(policy=policy, max_gates=20)  # type: ignore[arg-type]
    got = asdict(gate_params_for(3, 1, base, run))
    want = asdict(base)
    alpha = 1.0 / 20 if policy == "pfer" else 0.10 * lond_gamma(3, 20) * 2
    assert got.pop("alpha") == pytest.approx(alpha)
    assert got.pop("alpha_early") == pytest.approx(min(base.alpha_early, alpha / 5))
    del want["alpha"], want["alpha_early"]
    assert got == want
