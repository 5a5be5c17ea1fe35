"""Information ladder (fidelity #6) and baseline-cache provenance (GATE §6.3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_assets.domain.baseline_cache import (
    GATE_BASELINE,
    SLOW_EVAL,
    STEP_ROLLOUT,
    BaselineKey,
    ProvenanceError,
    cache_from_dict,
    cache_to_dict,
    lookup,
    make_entry,
)
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.ladder import (
    COLD_RIGHT,
    COLD_WRONG,
    LadderParams,
    LeakError,
    cold_order,
    information,
    ladder_for,
    ladder_from_dict,
    ladder_pool_fingerprint,
    ladder_to_dict,
    new_ladder,
    update_ladder,
    warm_order,
)
from trm_assets_tests.agent.fixtures import question

POOL = {f"q{i}": ("T" if i < 8 else "U") for i in range(10)}


def test_cold_start_beta_smoothing_and_interleave() -> None:
    lad = new_ladder(POOL, LadderParams())
    outcomes = {
        "q0": True,
        "q1": False,
        "q2": False,
        "q3": True,
        "q4": False,
        "q5": False,
        "q6": None,
    }
    lad = update_ladder(lad, "run_e0_s0", outcomes)
    e0, e1, e6 = lad.entry("q0"), lad.entry("q1"), lad.entry("q6")
    assert e0 is not None and e0.p_hat == pytest.approx(COLD_RIGHT) == pytest.approx(2 / 3)
    assert e1 is not None and e1.p_hat == pytest.approx(COLD_WRONG) == pytest.approx(1 / 3)
    assert e6 is not None and e6.n_obs == 0 and e6.p_hat == 0.5  # infra: still a probe
    # 2 wrong : 1 right, then a probe (q6, q7 never observed), in insertion order
    assert ladder_for(lad, "T", warm=False) == ("q1", "q2", "q0", "q6", "q4", "q5", "q3", "q7")
    assert ladder_for(lad, "T", warm=False, exclude=["q1"])[0] == "q2"
    assert lad.entry("zz") is None


def test_cold_order_remainders() -> None:
    assert cold_order([("a", 0.6), ("b", 0.6), ("c", 0.3)]) == ("c", "a", "b")
    assert cold_order([("p", 0.5), ("q", 0.5)]) == ("p", "q")
    assert cold_order([("w1", 0.2), ("w2", 0.2), ("w3", 0.2), ("p", 0.5)]) == (
        "w1",
        "w2",
        "w3",
        "p",
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1 / 3, 0.5 - 1e-12, 0.5, 0.5 + 1e-12, 2 / 3, 1.0])))
def test_cold_order_lists_every_question_once(ps: list[float]) -> None:
    """Review: a p̂ within rounding of ½ was both a probe and wrong (or right), so the question
    came twice in the order. Every question now comes exactly once."""
    p_hats = [(f"q{i}", p) for i, p in enumerate(ps)]
    order = cold_order(p_hats)
    assert sorted(order) == sorted(q for q, _ in p_hats)


def test_warm_ema_order_and_filter() -> None:
    lad = new_ladder(POOL, LadderParams(gamma=0.5, p_low=0.2, p_high=0.8))
    lad = update_ladder(lad, "r1", {"q0": True, "q1": False, "q2": True, "q3": True})
    lad = update_ladder(lad, "r2", {"q0": True, "q1": True, "q2": False, "q3": True})
    e0 = lad.entry("q0")
    assert e0 is not None and e0.p_hat == pytest.approx(0.5 * 2 / 3 + 0.5) and e0.n_obs == 2
    lad = update_ladder(lad, "r3", {"q0": True, "q3": True})
    # q0, q3 ≈ 0.92 dropped (> p_high); q1 = 0.667 and q2 = 0.333 equally informative: insertion
    # order; never-observed probes (p = ½) are the most informative
    order = ladder_for(lad, "T", warm=True)
    assert "q0" not in order and "q3" not in order
    assert order == ("q4", "q5", "q6", "q7", "q1", "q2")
    assert [e.qid for e in lad.entries] == sorted(POOL)  # storage order never changes
    assert information(0.5) == 0.25
    assert warm_order([("a", 0.1), ("b", 0.5)], 0.2, 0.8) == ("b",)


def test_anti_leak_and_idempotence() -> None:
    lad = new_ladder(POOL, LadderParams())
    with pytest.raises(LeakError, match="anti-leak"):
        update_ladder(lad, "run_gate_e1_s2_counting", {"q0": True})
    with pytest.raises(ValueError):
        update_ladder(lad, "", {"q0": True})
    once = update_ladder(lad, "run_e1_s1", {"q0": True, "zz": False})
    assert update_ladder(once, "run_e1_s1", {"q0": False}) == once


def test_ladder_params_validation() -> None:
    with pytest.raises(ValueError):
        LadderParams(p_low=0.8, p_high=0.2)
    with pytest.raises(ValueError):
        LadderParams(gamma=0.0)
    with pytest.raises(ValueError):
        LadderParams(wrong_per_right=0)


def test_ladder_round_trip_and_fingerprint_mismatch() -> None:
    params = LadderParams()
    lad = update_ladder(new_ladder(POOL, params), "r1", {"q0": True, "q9": False})
    fp = ladder_pool_fingerprint(POOL, params)
    data = ladder_to_dict(lad)
    assert ladder_from_dict(data, expected_pool_fingerprint=fp) == lad
    other = ladder_pool_fingerprint({**POOL, "q99": "T"}, params)
    with pytest.raises(DataFormatError, match="another validation pool"):
        ladder_from_dict(data, expected_pool_fingerprint=other)
    with pytest.raises(DataFormatError, match="format"):
        ladder_from_dict({**data, "format": "old"}, expected_pool_fingerprint=fp)
    tampered = {**data, "entries": [[*data["entries"][0][:2], 0.9, 1], *data["entries"][1:]]}
    with pytest.raises(DataFormatError, match="fingerprint"):
        ladder_from_dict(tampered, expected_pool_fingerprint=fp)
    for bad in ([["q0", "T", 1.5, 1]], [["q0", "T", 0.5, -1]], [[1, "T", 0.5, 0]], [["q0"]]):
        with pytest.raises(DataFormatError):
            ladder_from_dict({**data, "entries": bad}, expected_pool_fingerprint=fp)


# ------------------------------------------------------------------ baseline cache


KEY = BaselineKey("Counting Problem", "abc123", "p3", "q1", 0, "model=x;t=0.7")


def test_cache_keys_and_entries() -> None:
    assert make_entry(KEY, None, provenance=GATE_BASELINE, run_id="w_gate_e1") is None  # infra
    for prov in (STEP_ROLLOUT, SLOW_EVAL):
        with pytest.raises(ProvenanceError):
            make_entry(KEY, True, provenance=prov, run_id="w_e1_s1")
    with pytest.raises(ProvenanceError, match="not a gate run"):
        make_entry(KEY, True, provenance=GATE_BASELINE, run_id="w_e1_s1")
    with pytest.raises(ValueError, match="unknown provenance"):
        make_entry(KEY, True, provenance="cache", run_id="w_gate_e1")
    with pytest.raises(ValueError):
        BaselineKey("T", "h", "p", "q", -1)
    with pytest.raises(ValueError):
        BaselineKey("T", "", "p", "q", 0)
    rep1 = BaselineKey("Counting Problem", "abc123", "p3", "q1", 1, "model=x;t=0.7")
    assert rep1 != KEY  # R2: every pass has its own draw


def test_cache_lookup_and_round_trip() -> None:
    entry = make_entry(KEY, True, provenance=GATE_BASELINE, run_id="w_gate_e1_s1")
    assert entry is not None
    cache = {KEY: entry}
    assert lookup(cache, KEY) is True
    assert lookup(cache, BaselineKey("T", "h", "p", "q", 0)) is None
    with pytest.raises(ProvenanceError):
        lookup(cache, KEY, ladder_run_ids=["w_gate_e1_s1"])
    with pytest.raises(ValueError, match="inconsistent"):
        lookup({BaselineKey("T", "h", "p", "q", 0): entry}, BaselineKey("T", "h", "p", "q", 0))
    data = cache_to_dict([entry])
    assert cache_from_dict(data) == cache
    with pytest.raises(DataFormatError, match="format"):
        cache_from_dict({**data, "format": "x"})
    with pytest.raises(DataFormatError, match="entries"):
        cache_from_dict({**data, "entries": None})
    row = data["entries"][0]
    ladder_row = [*row[:7], "ladder_draw", "w_e0_s0"]
    with pytest.raises(DataFormatError, match="R1"):
        cache_from_dict({**data, "entries": [ladder_row]})
    with pytest.raises(DataFormatError, match="unique"):
        cache_from_dict({**data, "entries": [row, row]})
    with pytest.raises(DataFormatError, match="row 0"):
        cache_from_dict({**data, "entries": [[*row[:4], "0", *row[5:]]]})
    with pytest.raises(DataFormatError, match="fingerprint"):
        cache_from_dict({**data, "entries": [[*row[:6], False, *row[7:]]]})


def test_ladder_from_questions_equals_mapping() -> None:
    qs = [question(qid, task) for qid, task in reversed(list(POOL.items()))]
    params = LadderParams()
    assert new_ladder(qs, params) == new_ladder(POOL, params)
    assert ladder_pool_fingerprint(qs, params) == ladder_pool_fingerprint(POOL, params)
