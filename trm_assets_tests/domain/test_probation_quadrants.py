"""Probation (GATE §7) and quadrants (GATE §8)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trm_assets.domain.probation import ProbationParams, ProbationVerdict, probation_verdict
from trm_assets.domain.quadrants import (
    DISPLAY_ORDER,
    IMPROVED,
    PERSISTENT_FAIL,
    REGRESSED,
    RELIABLE,
    STABLE_SUCCESS,
    WEAK,
    categorize_pair,
    classify_quadrants,
    label_reliability,
)


def test_quadrant_constants_and_order() -> None:
    assert DISPLAY_ORDER[0] == REGRESSED
    assert set(DISPLAY_ORDER) == {IMPROVED, REGRESSED, PERSISTENT_FAIL, STABLE_SUCCESS}
    assert categorize_pair(False, True) == IMPROVED
    assert categorize_pair(True, False) == REGRESSED
    assert categorize_pair(False, False) == PERSISTENT_FAIL
    assert categorize_pair(True, True) == STABLE_SUCCESS


def test_classify_excludes_infra_and_one_sided() -> None:
    q = classify_quadrants(
        {"a": True, "b": False, "c": None, "d": True, "e": False},
        {"a": False, "b": True, "c": True, "d": True, "f": True, "e": False},
    )
    assert q.regressed == ("a",) and q.improved == ("b",) and q.stable_success == ("d",)
    assert q.persistent_fail == ("e",) and q.excluded == ("c", "f")
    assert list(q.counts()) == list(DISPLAY_ORDER)
    assert q.counts()[REGRESSED] == 1


def test_label_reliability() -> None:
    assert label_reliability(REGRESSED, 0.9) == RELIABLE
    assert label_reliability(REGRESSED, 0.5) == WEAK
    assert label_reliability(IMPROVED, 0.1) == RELIABLE
    assert label_reliability(IMPROVED, 0.5) == WEAK
    assert label_reliability(STABLE_SUCCESS, 0.95) == RELIABLE
    assert label_reliability(PERSISTENT_FAIL, 0.5) == WEAK
    with pytest.raises(ValueError):
        label_reliability("MAYBE", 0.5)


def _pool(w: int, los: int, ties: int) -> tuple[dict[str, bool | None], dict[str, bool | None]]:
    anchor: dict[str, bool | None] = {}
    current: dict[str, bool | None] = {}
    for i in range(w):
        anchor[f"w{i}"], current[f"w{i}"] = False, True
    for i in range(los):
        anchor[f"l{i}"], current[f"l{i}"] = True, False
    for i in range(ties):
        anchor[f"t{i}"], current[f"t{i}"] = True, True
    return anchor, current


def test_probation_rules() -> None:
    a, c = _pool(3, 3, 20)
    assert probation_verdict(a, c, confounded=True).verdict is ProbationVerdict.DEFER
    a, c = _pool(1, 0, 5)
    r = probation_verdict(a, c)
    assert r.verdict is ProbationVerdict.DEFER and r.pairs == 6
    a, c = _pool(3, 4, 20)
    assert probation_verdict(a, c).verdict is ProbationVerdict.ROLLBACK  # net < 0
    assert probation_verdict(a, c, params=ProbationParams(rollback_margin=1)).verdict is (
        ProbationVerdict.KEEP
    )
    a, c = _pool(0, 9, 5)
    r = probation_verdict(a, c, params=ProbationParams(rollback_margin=20))
    assert r.verdict is ProbationVerdict.ROLLBACK and r.log_e_harm >= math.log(10)
    a, c = _pool(3, 3, 20)
    assert probation_verdict(a, c).verdict is ProbationVerdict.KEEP
    a, c = _pool(12, 1, 20)
    r = probation_verdict(a, c)
    assert r.verdict is ProbationVerdict.KEEP_CONFIRMED and (r.wins, r.losses) == (12, 1)
    with pytest.raises(ValueError, match="independent"):
        probation_verdict(a, c, anchor_run_id="w_gate_e1_s2_counting")
    assert probation_verdict(a, c, anchor_run_id="w_e1_anchor").verdict is (
        ProbationVerdict.KEEP_CONFIRMED
    )
    with pytest.raises(ValueError):
        ProbationParams(alpha_harm=0)
    with pytest.raises(ValueError):
        ProbationParams(min_pairs=-1)


# GATE §7 table, N = 50 full pool, one draw each: P(ROLLBACK), P(KEEP_CONFIRMED).
PROBATION_TABLE = {
    -0.384: (0.71, 0.0005),
    0.0: (0.44, 0.003),
    0.388: (0.20, 0.022),
    0.790: (0.059, 0.091),
}


@pytest.mark.parametrize("shift", sorted(PROBATION_TABLE))
def test_probation_operating_characteristic(shift: float) -> None:
    reps, n = 5000, 50
    rng = np.random.default_rng(7)
    p_b = np.clip(rng.beta(0.6, 0.5, size=(reps, n)), 1e-9, 1 - 1e-9)
    p_c = 1.0 / (1.0 + np.exp(-(np.log(p_b / (1 - p_b)) + shift)))
    anchor = rng.random((reps, n)) < p_b
    current = rng.random((reps, n)) < p_c
    qids = [f"q{i}" for i in range(n)]
    counts = dict.fromkeys(ProbationVerdict, 0)
    for r in range(reps):
        v = probation_verdict(
            dict(zip(qids, anchor[r].tolist(), strict=True)),
            dict(zip(qids, current[r].tolist(), strict=True)),
        )
        counts[v.verdict] += 1
    want_rb, want_kc = PROBATION_TABLE[shift]
    for got, want in (
        (counts[ProbationVerdict.ROLLBACK] / reps, want_rb),
        (counts[ProbationVerdict.KEEP_CONFIRMED] / reps, want_kc),
    ):
        # our MC error plus the table's own (20,000 replicates), 3 SE, plus table rounding
        se = math.sqrt(want * (1 - want) * (1 / reps + 1 / 20000))
        assert abs(got - want) <= 3 * se + 0.001
    assert counts[ProbationVerdict.DEFER] == 0
