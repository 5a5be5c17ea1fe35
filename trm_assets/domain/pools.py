"""Three pools by progressive exclusion: test → validation → diagnosis (SPEC 5.1, seed §8).

* **test** keeps the natural task distribution: a proportional allocation per task type (largest
  remainder), so its mix equals the data's up to rounding. It is read-only for reporting.
* **validation** is stratified: at least ``eval_min_per_class`` per task type, the rest allocated
  proportionally to what remains.
* **diagnosis** is everything else.

Deterministic from the generator: question ids are sorted before any seeded shuffle. The result is
a frozen value with a fingerprint; the serialized form refuses old or invalid formats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.fingerprint import fingerprint
from trm_assets.domain.question import Question

POOLS_FORMAT: Final = "trm.pools/1"
POOL_NAMES: Final[tuple[str, str, str]] = ("test", "validation", "diagnosis")


@dataclass(frozen=True, slots=True)
class Pools:
    """Disjoint question-id pools (each sorted) and their content fingerprint."""

    test: tuple[str, ...]
    validation: tuple[str, ...]
    diagnosis: tuple[str, ...]
    fingerprint: str

    def pool(self, name: str) -> tuple[str, ...]:
        if name not in POOL_NAMES:
            raise ValueError(f"unknown pool {name!r}; expected one of {POOL_NAMES}")
        result: tuple[str, ...] = getattr(self, name)
        return result


def task_map(questions: Sequence[Question] | Mapping[str, str]) -> dict[str, str]:
    """qid → task type from questions (or pass a mapping through); duplicate ids are refused."""
    if isinstance(questions, Mapping):
        return dict(questions)
    result: dict[str, str] = {}
    for q in questions:
        if q.question_id in result:
            raise ValueError(f"question id {q.question_id!r} appears twice")
        result[q.question_id] = q.task_type
    return result


def _group(tasks: Mapping[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for qid in sorted(tasks):
        groups.setdefault(tasks[qid], []).append(qid)
    return {name: groups[name] for name in sorted(groups)}


def proportional_allocation(sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """Split ``total`` over groups proportionally to ``sizes`` (largest remainder, ties by name)."""
    n = sum(sizes.values())
    if total > n or total < 0:
        raise ValueError(f"cannot allocate {total} out of {n}")
    if n == 0:
        return dict.fromkeys(sizes, 0)
    quotas = {k: total * v / n for k, v in sizes.items()}
    alloc = {k: int(q) for k, q in quotas.items()}
    left = total - sum(alloc.values())
    for k in sorted(sizes, key=lambda k: (-(quotas[k] - alloc[k]), k)):
        if left == 0:
            break
        if alloc[k] < sizes[k]:
            alloc[k] += 1
            left -= 1
    return alloc


def split_pools(
    questions: Sequence[Question] | Mapping[str, str],
    *,
    test_size: int,
    val_size: int,
    eval_min_per_class: int,
    rng: np.random.Generator,
) -> Pools:
    """Split by progressive exclusion (see the module doc). Raises ``ValueError`` when a size is
    impossible, naming the task type that is short."""
    tasks = task_map(questions)
    n = len(tasks)
    if test_size < 0 or val_size < 0 or eval_min_per_class < 0:
        raise ValueError("pool sizes must be >= 0")
    if test_size + val_size > n:
        raise ValueError(f"test_size + val_size = {test_size + val_size} exceeds {n} questions")
    groups = _group(tasks)
    for name in groups:  # sorted names: the shuffles are consumed in a fixed order
        order = rng.permutation(len(groups[name]))
        groups[name] = [groups[name][i] for i in order]
    if val_size < eval_min_per_class * len(groups):
        raise ValueError(
            f"val_size={val_size} < eval_min_per_class={eval_min_per_class} × "
            f"{len(groups)} task types"
        )
    test_alloc = proportional_allocation({k: len(v) for k, v in groups.items()}, test_size)
    test = [q for k, v in groups.items() for q in v[: test_alloc[k]]]
    rest = {k: v[test_alloc[k] :] for k, v in groups.items()}
    short = {k: len(v) for k, v in rest.items() if len(v) < eval_min_per_class}
    if short:
        raise ValueError(
            f"after the test pool, task type(s) {short} have fewer than eval_min_per_class="
            f"{eval_min_per_class} questions left for validation; lower test_size or the minimum"
        )
    extra = proportional_allocation(
        {k: len(v) - eval_min_per_class for k, v in rest.items()},
        val_size - eval_min_per_class * len(rest),
    )
    val_alloc = {k: eval_min_per_class + extra[k] for k in rest}
    validation = [q for k, v in rest.items() for q in v[: val_alloc[k]]]
    diagnosis = [q for k, v in rest.items() for q in v[val_alloc[k] :]]
    return make_pools(test, validation, diagnosis)


def make_pools(test: Sequence[str], validation: Sequence[str], diagnosis: Sequence[str]) -> Pools:
    """Build a :class:`Pools` (sorted, fingerprinted); refuses overlapping pools."""
    t, v, d = tuple(sorted(test)), tuple(sorted(validation)), tuple(sorted(diagnosis))
    problems = _overlaps(t, v, d)
    if problems:
        raise ValueError("pools overlap: " + "; ".join(problems))
    return Pools(t, v, d, fingerprint({"test": t, "validation": v, "diagnosis": d}))


def _overlaps(t: Sequence[str], v: Sequence[str], d: Sequence[str]) -> list[str]:
    problems = []
    for (na, a), (nb, b) in (
        (("test", t), ("validation", v)),
        (("test", t), ("diagnosis", d)),
        (("validation", v), ("diagnosis", d)),
    ):
        both = sorted(set(a) & set(b))
        if both:
            problems.append(f"{len(both)} id(s) in both {na} and {nb}, e.g. {both[0]!r}")
    for name, ids in (("test", t), ("validation", v), ("diagnosis", d)):
        if len(set(ids)) != len(ids):
            problems.append(f"pool {name!r} lists an id twice")
    return problems


def pools_to_dict(pools: Pools) -> dict[str, Any]:
    """JSON-ready form (``pools.json``)."""
    return {
        "format": POOLS_FORMAT,
        "test": list(pools.test),
        "validation": list(pools.validation),
        "diagnosis": list(pools.diagnosis),
        "fingerprint": pools.fingerprint,
    }


def pools_from_dict(data: Mapping[str, Any], source: str = "pools.json") -> Pools:
    """Load frozen pools; an old format (no ``test`` key / no format tag), a non-string id,
    overlapping pools or a fingerprint mismatch raise :class:`DataFormatError`."""
    if "test" not in data:
        raise DataFormatError(
            source, None, "test", "a 'test' pool (this is an old two-pool file; re-split the pools)"
        )
    if data.get("format") != POOLS_FORMAT:
        raise DataFormatError(
            source, None, "format", f"{POOLS_FORMAT!r}, got {data.get('format')!r}"
        )
    problems: list[str] = []
    lists: dict[str, list[str]] = {}
    for name in POOL_NAMES:
        raw = data.get(name)
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            problems.append(f"field {name!r}: expected a list of non-empty question-id strings")
        else:
            lists[name] = raw
    if problems:
        raise DataFormatError.from_messages(source, problems)
    try:
        pools = make_pools(lists["test"], lists["validation"], lists["diagnosis"])
    except ValueError as exc:
        raise DataFormatError(source, None, None, f"disjoint pools ({exc})") from exc
    if data.get("fingerprint") != pools.fingerprint:
        raise DataFormatError(
            source, None, "fingerprint", f"{pools.fingerprint!r} (file edited or corrupted)"
        )
    return pools


def check_pools_cover(pools: Pools, questions: Sequence[Question] | Mapping[str, str]) -> None:
    """Refuse pools that name a question the data does not have (e.g. a changed question set)."""
    known = set(task_map(questions))
    unknown = sorted(q for name in POOL_NAMES for q in pools.pool(name) if q not in known)
    if unknown:
        raise DataFormatError(
            "pools.json",
            None,
            None,
            f"question ids present in the questions file; {len(unknown)} are not, "
            f"e.g. {unknown[0]!r}",
        )
