"""Pools (SPEC 5.1) and mini-batches (fidelity #10)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_assets.domain.batching import (
    batch_task_counts,
    check_batch_params,
    make_batches,
    spread_mix,
    wrong_ids,
)
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.pools import (
    check_pools_cover,
    make_pools,
    pools_from_dict,
    pools_to_dict,
    proportional_allocation,
    split_pools,
    task_map,
)
from trm_assets_tests.agent.fixtures import question


def corpus(sizes: dict[str, int]) -> dict[str, str]:
    return {f"{t[:3]}-{i:03d}": t for t, n in sizes.items() for i in range(n)}


SIZES = {"Counting": 40, "OCR": 12, "Action": 25, "Temporal": 8}

# ------------------------------------------------------------------ pools


def test_split_pools_properties() -> None:
    tasks = corpus(SIZES)
    pools = split_pools(
        tasks, test_size=17, val_size=24, eval_min_per_class=4, rng=np.random.default_rng(0)
    )
    all_ids = set(pools.test) | set(pools.validation) | set(pools.diagnosis)
    assert all_ids == set(tasks) and len(pools.test) == 17 and len(pools.validation) == 24
    test_mix = Counter(tasks[q] for q in pools.test)
    assert test_mix == {"Counting": 8, "OCR": 2, "Action": 5, "Temporal": 2}  # natural mix
    val_mix = Counter(tasks[q] for q in pools.validation)
    assert min(val_mix.values()) >= 4 and set(val_mix) == set(SIZES)
    again = split_pools(
        dict(reversed(list(tasks.items()))),
        test_size=17,
        val_size=24,
        eval_min_per_class=4,
        rng=np.random.default_rng(0),
    )
    assert again == pools  # input order does not matter
    other = split_pools(
        tasks, test_size=17, val_size=24, eval_min_per_class=4, rng=np.random.default_rng(1)
    )
    assert other.fingerprint != pools.fingerprint
    assert pools.pool("test") == pools.test
    with pytest.raises(ValueError):
        pools.pool("train")


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(st.sampled_from(list("ABCDE")), st.integers(3, 30), min_size=1),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_pools_disjoint_and_complete(sizes: dict[str, int], seed: int, data: st.DataObject) -> None:
    tasks = corpus(sizes)
    n = len(tasks)
    m = data.draw(st.integers(0, 3))
    val = data.draw(st.integers(m * len(sizes), n))
    test = data.draw(st.integers(0, n - val))
    try:
        pools = split_pools(
            tasks,
            test_size=test,
            val_size=val,
            eval_min_per_class=m,
            rng=np.random.default_rng(seed),
        )
    except ValueError as exc:
        assert "eval_min_per_class" in str(exc)
        return
    parts = [set(pools.test), set(pools.validation), set(pools.diagnosis)]
    assert sum(map(len, parts)) == n and set().union(*parts) == set(tasks)
    assert len(pools.test) == test and len(pools.validation) == val
    assert pools_from_dict(pools_to_dict(pools)) == pools


def test_split_pools_errors() -> None:
    tasks = corpus({"A": 5, "B": 5})
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="exceeds"):
        split_pools(tasks, test_size=8, val_size=5, eval_min_per_class=1, rng=rng)
    with pytest.raises(ValueError, match="eval_min_per_class"):
        split_pools(tasks, test_size=0, val_size=3, eval_min_per_class=2, rng=rng)
    with pytest.raises(ValueError, match="fewer than"):
        split_pools(
            corpus({"A": 9, "B": 2}), test_size=4, val_size=4, eval_min_per_class=2, rng=rng
        )
    with pytest.raises(ValueError, match=">= 0"):
        split_pools(tasks, test_size=-1, val_size=0, eval_min_per_class=0, rng=rng)
    with pytest.raises(ValueError, match="twice"):
        task_map([question("a", "T"), question("a", "T")])
    with pytest.raises(ValueError):
        proportional_allocation({"a": 1}, 2)
    assert proportional_allocation({}, 0) == {}


def test_pools_serialization_refusals() -> None:
    pools = make_pools(["a"], ["b"], ["c"])
    good = pools_to_dict(pools)
    with pytest.raises(DataFormatError, match="old two-pool"):
        pools_from_dict({"validation": ["b"], "diagnosis": ["c"]})
    with pytest.raises(DataFormatError, match="format"):
        pools_from_dict({**good, "format": "trm.pools/0"})
    with pytest.raises(DataFormatError, match="'validation'"):
        pools_from_dict({**good, "validation": [1]})
    with pytest.raises(DataFormatError, match="disjoint"):
        pools_from_dict({**good, "diagnosis": ["a"]})
    with pytest.raises(DataFormatError, match="fingerprint"):
        pools_from_dict({**good, "diagnosis": ["d"]})
    with pytest.raises(ValueError, match="twice"):
        make_pools(["a", "a"], [], [])
    check_pools_cover(pools, {"a": "T", "b": "T", "c": "T"})
    with pytest.raises(DataFormatError, match="'c'"):
        check_pools_cover(pools, [question("a", "T"), question("b", "T")])


# ------------------------------------------------------------------ batching


def test_batch_param_self_check() -> None:
    with pytest.raises(ValueError, match="min_class_per_batch < batch_size"):
        check_batch_params(8, 8)
    with pytest.raises(ValueError):
        check_batch_params(1, 1)
    with pytest.raises(ValueError):
        check_batch_params(8, 0)
    with pytest.raises(ValueError):
        make_batches(
            {"a": "T"},
            batch_size=4,
            min_class_per_batch=4,
            correctness={},
            rng=np.random.default_rng(0),
        )
    assert (
        make_batches(
            {}, batch_size=4, min_class_per_batch=2, correctness={}, rng=np.random.default_rng(0)
        )
        == ()
    )


def test_wrong_means_exactly_false() -> None:
    corr: dict[str, bool | None] = {"a": False, "b": None, "c": True}
    assert wrong_ids(["a", "b", "c", "d"], corr) == ["a"]
    assert spread_mix(["w1", "w2"], list("abcdef")) == ["a", "b", "w1", "c", "d", "e", "w2", "f"]
    assert spread_mix([], ["a"]) == ["a"]
    assert spread_mix(["w"], []) == ["w"]


def test_small_groups_whole_and_large_scattered() -> None:
    tasks = corpus({"Big": 30, "Mid": 9, "Tiny": 3, "Small": 5})
    batches = make_batches(
        tasks, batch_size=10, min_class_per_batch=3, correctness={}, rng=np.random.default_rng(5)
    )
    counts = batch_task_counts(batches, tasks)
    # small types (< batch_size) are never split
    for t in ("Mid", "Tiny", "Small"):
        assert sum(1 for c in counts if t in c) == 1
    # the large type is scattered in chunks of >= min_class_per_batch over several batches
    big = [c["Big"] for c in counts if "Big" in c]
    assert len(big) >= 3 and min(big) >= 3 and sum(big) == 30


def test_correctness_mix_spreads_wrong_answers_only_for_types_with_wrong() -> None:
    tasks = corpus({"Big": 40, "Other": 40})
    wrong = sorted(q for q in tasks if tasks[q] == "Big")[:8]
    corr: dict[str, bool | None] = {q: False for q in wrong}
    corr |= {q: None for q in tasks if q not in wrong}  # unknown never counts as wrong
    batches = make_batches(
        tasks, batch_size=10, min_class_per_batch=4, correctness=corr, rng=np.random.default_rng(2)
    )
    with_wrong = [sum(1 for q in b if q in wrong) for b in batches]
    assert sum(with_wrong) == 8
    assert max(with_wrong) <= 2  # spread, not clumped in one batch


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["A", "B", "C", "D", "E", "F"]), st.integers(1, 40), min_size=1
    ),
    st.integers(2, 16),
    st.data(),
    st.integers(0, 2**32 - 1),
)
def test_batching_partitions_exactly_and_deterministically(
    sizes: dict[str, int], batch_size: int, data: st.DataObject, seed: int
) -> None:
    tasks = corpus(sizes)
    m = data.draw(st.integers(1, batch_size - 1))
    corr = {q: data.draw(st.sampled_from([True, False, None])) for q in sorted(tasks)[:20]}
    batches = make_batches(
        tasks,
        batch_size=batch_size,
        min_class_per_batch=m,
        correctness=corr,
        rng=np.random.default_rng(seed),
    )
    flat = [q for b in batches for q in b]
    assert sorted(flat) == sorted(tasks) and len(flat) == len(set(flat))
    again = make_batches(
        dict(sorted(tasks.items(), reverse=True)),
        batch_size=batch_size,
        min_class_per_batch=m,
        correctness=corr,
        rng=np.random.default_rng(seed),
    )
    assert again == batches
    assert len(batches) <= -(-len(tasks) // batch_size)
    # overflow only when nothing fits, and then into the least-loaded batch (<= batch_size)
    assert max(len(b) for b in batches) <= batch_size + max(batch_size - 1, 2 * m - 1)


def test_batches_from_questions() -> None:
    qs = [question(f"q{i}", "T" if i % 2 else "U") for i in range(12)]
    batches = make_batches(
        qs, batch_size=6, min_class_per_batch=2, correctness={}, rng=np.random.default_rng(0)
    )
    assert sorted(q for b in batches for q in b) == sorted(q.question_id for q in qs)


def test_types_without_wrong_answers_are_not_mixed() -> None:
    tasks = corpus({"Big": 30, "Other": 30})
    rng_seed = 9
    right: dict[str, bool | None] = dict.fromkeys(tasks, True)
    unknown: dict[str, bool | None] = {}
    kwargs = {"batch_size": 10, "min_class_per_batch": 3}
    a = make_batches(tasks, correctness=right, rng=np.random.default_rng(rng_seed), **kwargs)
    b = make_batches(tasks, correctness=unknown, rng=np.random.default_rng(rng_seed), **kwargs)
    assert a == b  # True and unknown are both "not wrong"
    one_wrong = right | {sorted(tasks)[0]: False}
    c = make_batches(tasks, correctness=one_wrong, rng=np.random.default_rng(rng_seed), **kwargs)
    assert c != a  # a type with a wrong answer is re-mixed

    def other_seq(bs: tuple[tuple[str, ...], ...]) -> list[str]:
        return [q for b_ in bs for q in b_ if tasks[q] == "Other"]

    assert other_seq(c) == other_seq(a)  # "Other" has no wrong answer: its order is untouched
