"""Mini-batches of the diagnosis pool (fidelity #10, SPEC 5.2, seed §9 ``batching``).

Point by point (seed: "FFD + round-robin + 正确率混合、确定性"):

1. **Parameter self-check** first: ``batch_size >= 2`` and ``1 <= min_class_per_batch < batch_size``
   (strictly), else ``ValueError``.
2. Task types are processed in **sorted name order**; each group is shuffled with the **seeded**
   generator (one permutation per group, consumed in sorted order).
3. **Correctness mix**: a question counts as wrong only if ``correctness.get(qid) is False``
   (unknown / ``None`` does not). Only task types that *have* wrong answers are mixed: their wrong
   questions are spread evenly through the group's order so every piece of the group that lands in a
   batch carries its share of failures to diagnose. Types without wrong answers keep the shuffle.
4. **Small task types** (fewer than ``batch_size`` questions) are packed **whole** into batches,
   first-fit-decreasing (largest group first, ties by name): never split.
5. **Large task types** (``>= batch_size``) are cut into chunks of ``min_class_per_batch`` (a short
   tail is merged into the previous chunk so no chunk is smaller) and scattered **round-robin**
   over the batches with **one global pointer** shared by all large types, so consecutive large
   types start on different batches.

The number of batches is ``ceil(n / batch_size)``; a batch can exceed ``batch_size`` only when no
batch has room for a whole group or chunk (by less than one group/chunk). The output partitions
the input exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from trm_assets.domain.pools import task_map
from trm_assets.domain.question import Question


def check_batch_params(batch_size: int, min_class_per_batch: int) -> None:
    """Self-check (SPEC §4 minibatch layer): ``min_class_per_batch < batch_size`` strictly."""
    if batch_size < 2:
        raise ValueError(f"batch_size must be >= 2, got {batch_size}")
    if not 1 <= min_class_per_batch < batch_size:
        raise ValueError(
            f"min_class_per_batch must satisfy 1 <= min_class_per_batch < batch_size, "
            f"got {min_class_per_batch} with batch_size={batch_size}"
        )


def wrong_ids(qids: Sequence[str], correctness: Mapping[str, bool | None]) -> list[str]:
    """Questions currently answered wrong: ``correctness.get(qid) is False`` exactly."""
    return [q for q in qids if correctness.get(q) is False]


def spread_mix(wrong: Sequence[str], others: Sequence[str]) -> list[str]:
    """Interleave ``wrong`` evenly through ``others``; both relative orders are preserved.

    Wrong question j goes to slot ⌊(j + ½)·n / n_wrong⌋ of the n slots (distinct slots since
    n_wrong <= n), the others fill the remaining slots in order.
    """
    n_w, n = len(wrong), len(wrong) + len(others)
    if n_w == 0:
        return list(others)
    slots = {(2 * j + 1) * n // (2 * n_w) for j in range(n_w)}
    wrong_iter, other_iter = iter(wrong), iter(others)
    return [next(wrong_iter) if i in slots else next(other_iter) for i in range(n)]


def _chunks(ids: Sequence[str], size: int) -> list[list[str]]:
    chunks = [list(ids[i : i + size]) for i in range(0, len(ids), size)]
    if len(chunks) > 1 and len(chunks[-1]) < size:
        chunks[-2].extend(chunks.pop())
    return chunks


def make_batches(
    questions: Sequence[Question] | Mapping[str, str],
    *,
    batch_size: int,
    min_class_per_batch: int,
    correctness: Mapping[str, bool | None],
    rng: np.random.Generator,
) -> tuple[tuple[str, ...], ...]:
    """Partition the questions into mini-batches (see the module doc for the algorithm)."""
    check_batch_params(batch_size, min_class_per_batch)
    tasks = task_map(questions)
    if not tasks:
        return ()
    groups: dict[str, list[str]] = {}
    for qid in sorted(tasks):
        groups.setdefault(tasks[qid], []).append(qid)
    ordered: dict[str, list[str]] = {}
    for name in sorted(groups):
        ids = groups[name]
        shuffled = [ids[i] for i in rng.permutation(len(ids))]
        wrong = wrong_ids(shuffled, correctness)
        if wrong:  # only task types that have wrong answers are mixed
            wrong_set = set(wrong)
            shuffled = spread_mix(wrong, [q for q in shuffled if q not in wrong_set])
        ordered[name] = shuffled

    n_batches = math.ceil(len(tasks) / batch_size)
    batches: list[list[str]] = [[] for _ in range(n_batches)]

    small = [name for name in ordered if len(ordered[name]) < batch_size]
    large = [name for name in ordered if len(ordered[name]) >= batch_size]
    for name in sorted(small, key=lambda k: (-len(ordered[k]), k)):  # first-fit decreasing
        group = ordered[name]
        target = next((b for b in batches if len(b) + len(group) <= batch_size), None)
        if target is None:
            target = min(batches, key=len)
        target.extend(group)

    pointer = 0  # global round-robin pointer, shared by all large task types
    for name in large:
        for chunk in _chunks(ordered[name], min_class_per_batch):
            for step in range(n_batches):
                idx = (pointer + step) % n_batches
                if len(batches[idx]) + len(chunk) <= batch_size:
                    break
            else:
                idx = min(
                    range(n_batches), key=lambda i: (len(batches[i]), (i - pointer) % n_batches)
                )
            batches[idx].extend(chunk)
            pointer = (idx + 1) % n_batches
    return tuple(tuple(b) for b in batches if b)


def batch_task_counts(
    batches: Sequence[Sequence[str]], questions: Sequence[Question] | Mapping[str, str]
) -> list[dict[str, int]]:
    """Per batch, task type → number of questions (for reports and tests)."""
    tasks = task_map(questions)
    out = []
    for b in batches:
        counts: dict[str, int] = {}
        for q in b:
            counts[tasks[q]] = counts.get(tasks[q], 0) + 1
        out.append(dict(sorted(counts.items())))
    return out
