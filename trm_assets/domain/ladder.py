"""The information ladder (fidelity #6, SPEC 5.5, seed §10): per-question p̂ and order.

* **Cold start**: one observation smoothed with Beta(1,1): wrong → p̂ = 1/3, right → p̂ = 2/3.
  The cold order interleaves 2 previously-wrong : 1 previously-right question, plus one *probe*
  (a question never observed, p̂ = ½) after each such triple.
* **Warm** (after the first epoch's refresh): γ-EMA updates p̂ ← (1−γ)p̂ + γx; the order is
  p̂(1−p̂) descending, dropping questions with p̂ outside [p_low, p_high] (near-zero information).
* Entries are stored in **insertion order**; sorting happens only when a ladder is taken.
* **Anti-leak rule** (防泄露铁律): an update from a run id containing ``_gate_`` is refused; gate
  rollouts never flow back into p̂ (GATE §3.1, §6.2).
* Serialized with a fingerprint of the ladder's inputs; a mismatch raises instead of rebuilding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.fingerprint import fingerprint
from trm_assets.domain.pools import task_map
from trm_assets.domain.question import Question

LADDER_FORMAT: Final = "trm.ladder/1"
GATE_RUN_MARK: Final = "_gate_"
COLD_WRONG: Final = 1.0 / 3.0  # Beta(1,1) posterior mean after one wrong answer
COLD_RIGHT: Final = 2.0 / 3.0  # … after one right answer
PROBE_P: Final = 0.5  # Beta(1,1) prior mean: never observed


class LeakError(ValueError):
    """A gate rollout was offered to the ladder (anti-leak rule)."""


@dataclass(frozen=True, slots=True)
class LadderParams:
    """Ladder knobs (SPEC §4: ladder ``p_low``/``p_high``/``γ``)."""

    p_low: float = 0.2
    p_high: float = 0.8
    gamma: float = 0.3
    wrong_per_right: int = 2  # the cold 2:1 interleave
    probe_every: int = 3  # one probe after every `probe_every` cold slots

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_low < self.p_high <= 1.0:
            raise ValueError(f"need 0 <= p_low < p_high <= 1, got {self.p_low}, {self.p_high}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.wrong_per_right < 1 or self.probe_every < 1:
            raise ValueError("wrong_per_right and probe_every must be >= 1")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LadderEntry:
    """One validation question's pass-rate estimate."""

    qid: str
    task_type: str
    p_hat: float
    n_obs: int


@dataclass(frozen=True, slots=True)
class Ladder:
    """All ladder entries in insertion order, the runs already folded in, and what it was built for.

    ``pool_fingerprint`` identifies the validation pool (and params) the ladder belongs to.
    """

    entries: tuple[LadderEntry, ...]
    params: LadderParams
    pool_fingerprint: str
    applied_runs: tuple[str, ...] = ()

    def entry(self, qid: str) -> LadderEntry | None:
        for e in self.entries:
            if e.qid == qid:
                return e
        return None


def ladder_pool_fingerprint(
    validation: Sequence[Question] | Mapping[str, str], params: LadderParams
) -> str:
    """Fingerprint of the validation pool (qid → task type) and the ladder params."""
    pool = task_map(validation)
    return fingerprint({"pool": sorted(pool.items()), "params": params.as_dict()})


def new_ladder(validation: Sequence[Question] | Mapping[str, str], params: LadderParams) -> Ladder:
    """An empty ladder: every validation question is a probe (p̂ = ½, no observation).

    ``validation`` is the validation pool's questions (or qid → task type); entries are inserted in
    sorted qid order so the result does not depend on the input order.
    """
    pool = task_map(validation)
    entries = tuple(LadderEntry(qid, pool[qid], PROBE_P, 0) for qid in sorted(pool))
    return Ladder(entries, params, ladder_pool_fingerprint(pool, params))


def update_ladder(ladder: Ladder, run_id: str, outcomes: Mapping[str, bool | None]) -> Ladder:
    """Fold one run's per-question outcomes into p̂ (γ-EMA; first observation → Beta(1,1) mean).

    Refuses a gate run (``_gate_`` in the id: anti-leak rule). ``None`` outcomes (infra) and
    questions outside the ladder's pool are ignored. Folding the same run twice is a no-op, so
    a resumed slow update ends in the same state.
    """
    if GATE_RUN_MARK in run_id:
        raise LeakError(
            f"run {run_id!r} is a gate run ({GATE_RUN_MARK!r} in its id); gate rollouts never "
            "update the ladder's p-hat (anti-leak rule)"
        )
    if not run_id:
        raise ValueError("run_id must be non-empty")
    if run_id in ladder.applied_runs:
        return ladder
    gamma = ladder.params.gamma
    new_entries: list[LadderEntry] = []
    for e in ladder.entries:
        x = outcomes.get(e.qid)
        if x is None:
            new_entries.append(e)
        elif e.n_obs == 0:
            new_entries.append(replace(e, p_hat=COLD_RIGHT if x else COLD_WRONG, n_obs=1))
        else:
            p = (1.0 - gamma) * e.p_hat + gamma * (1.0 if x else 0.0)
            new_entries.append(replace(e, p_hat=p, n_obs=e.n_obs + 1))
    return replace(ladder, entries=tuple(new_entries), applied_runs=(*ladder.applied_runs, run_id))


def information(p_hat: float) -> float:
    """p̂(1−p̂): the discordance a question can show, the warm sort key."""
    return p_hat * (1.0 - p_hat)


def warm_order(p_hats: Sequence[tuple[str, float]], p_low: float, p_high: float) -> tuple[str, ...]:
    """Warm ladder order: drop p̂ outside [p_low, p_high], sort by p̂(1−p̂) descending.

    The sort is stable: questions whose p̂(1−p̂) are equal as floats keep their insertion order.
    p̂ and 1 − p̂ may differ in the last bit (0.3 · 0.7 = 0.21, 0.7 · (1 − 0.7) =
    0.21000000000000002), and then the rounding orders them: deterministic, and kept as it is
    because the committed default-world figures depend on it.
    """
    kept = [(qid, p) for qid, p in p_hats if p_low <= p <= p_high]
    kept.sort(key=lambda item: -information(item[1]))
    return tuple(qid for qid, _ in kept)


def cold_order(
    p_hats: Sequence[tuple[str, float]], wrong_per_right: int = 2, probe_every: int = 3
) -> tuple[str, ...]:
    """Cold ladder order: ``wrong_per_right`` previously-wrong, then one previously-right question,
    with one probe (never observed, p̂ = ½) after every ``probe_every`` slots; each class keeps
    insertion order and whatever remains of a class when the others run out follows in turn.
    """
    # one class per question: a p̂ within rounding of ½ is a probe, never also wrong or right
    # (review: 0.5 − 1e-12 was listed twice, which pair_block refuses)
    probes = [q for q, p in p_hats if math.isclose(p, PROBE_P)]
    wrong = [q for q, p in p_hats if p < PROBE_P and not math.isclose(p, PROBE_P)]
    right = [q for q, p in p_hats if p > PROBE_P and not math.isclose(p, PROBE_P)]
    order: list[str] = []
    wi = ri = pi = 0
    slots = 0
    while wi < len(wrong) or ri < len(right) or pi < len(probes):
        progressed = False
        for _ in range(wrong_per_right):
            if wi < len(wrong):
                order.append(wrong[wi])
                wi += 1
                slots += 1
                progressed = True
        if ri < len(right):
            order.append(right[ri])
            ri += 1
            slots += 1
            progressed = True
        if pi < len(probes) and (slots >= probe_every or not progressed):
            order.append(probes[pi])
            pi += 1
            slots = 0
    return tuple(order)


def ladder_for(
    ladder: Ladder,
    task_type: str,
    *,
    warm: bool,
    exclude: Iterable[str] = (),
) -> tuple[str, ...]:
    """The ladder of one task type, taken now (order fixed before the gate starts).

    ``warm`` is the run's ``gate_epoch_observed`` switch; ``exclude`` removes the case-pack
    questions the candidate was generated from (SPEC 5.3 step 4).
    """
    skip = set(exclude)
    p_hats = [
        (e.qid, e.p_hat) for e in ladder.entries if e.task_type == task_type and e.qid not in skip
    ]
    params = ladder.params
    if warm:
        return warm_order(p_hats, params.p_low, params.p_high)
    return cold_order(p_hats, params.wrong_per_right, params.probe_every)


def _body(ladder: Ladder) -> dict[str, Any]:
    return {
        "params": ladder.params.as_dict(),
        "pool_fingerprint": ladder.pool_fingerprint,
        "applied_runs": list(ladder.applied_runs),
        "entries": [[e.qid, e.task_type, e.p_hat, e.n_obs] for e in ladder.entries],
    }


def ladder_to_dict(ladder: Ladder) -> dict[str, Any]:
    """JSON-ready form: entries as ``[qid, task_type, p_hat, n_obs]`` in insertion order."""
    body = _body(ladder)
    return {"format": LADDER_FORMAT, **body, "fingerprint": fingerprint(body)}


def ladder_from_dict(
    data: Mapping[str, Any], *, expected_pool_fingerprint: str, source: str = "ladder.json"
) -> Ladder:
    """Load a ladder; refuses another format, a malformed entry, an edited file (fingerprint), and
    a ladder built for another validation pool or other params (``expected_pool_fingerprint``,
    see :func:`ladder_pool_fingerprint`): a mismatch raises; never silently rebuilt."""
    if data.get("format") != LADDER_FORMAT:
        raise DataFormatError(
            source, None, "format", f"{LADDER_FORMAT!r}, got {data.get('format')!r}"
        )
    try:
        params = LadderParams(**data["params"])
        entries = []
        for i, raw in enumerate(data["entries"]):
            qid, task_type, p_hat, n_obs = raw
            if not (isinstance(qid, str) and isinstance(task_type, str)):
                raise ValueError(f"entry {i}: qid and task_type must be strings")
            if not (isinstance(p_hat, float | int) and 0.0 <= p_hat <= 1.0):
                raise ValueError(f"entry {i}: p_hat must be in [0, 1], got {p_hat!r}")
            if not isinstance(n_obs, int) or n_obs < 0:
                raise ValueError(f"entry {i}: n_obs must be a non-negative integer, got {n_obs!r}")
            entries.append(LadderEntry(qid, task_type, float(p_hat), n_obs))
        applied = tuple(str(r) for r in data["applied_runs"])
        pool_fp = str(data["pool_fingerprint"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DataFormatError(source, None, None, f"a {LADDER_FORMAT} ladder ({exc})") from exc
    ladder = Ladder(tuple(entries), params, pool_fp, applied)
    if data.get("fingerprint") != fingerprint(_body(ladder)):
        raise DataFormatError(
            source, None, "fingerprint", "the stored fingerprint (file edited or corrupted)"
        )
    if pool_fp != expected_pool_fingerprint:
        raise DataFormatError(
            source,
            None,
            "pool_fingerprint",
            f"{expected_pool_fingerprint!r} (the ladder was built for another validation pool or "
            f"other ladder params, got {pool_fp!r}); rebuild it deliberately",
        )
    return ladder
