"""Baseline-cache keys, entries and provenance rules (GATE §6.3 R1/R2/R4, SPEC 5.4). Pure.

The harness owns the file (disk write succeeds before memory is updated); this module decides
what may enter the cache and what may be served from it:

* **R1**: only draws produced by the gate's own baseline rollouts (``provenance ==
  "gate_baseline"``, run id containing ``_gate_``) may be cached or served. A draw that built the
  ladder (step rollouts, the slow-update R) is refused: using it as the gate's baseline took false
  ACCEPTs of an identical candidate from 1.8% to 34% in the simulation.
* **R2**: the key carries the replicate (pass) index, so every pass gets a fresh baseline draw.
* **R4**: the key carries a ``context_hash`` covering everything else that changes the baseline's
  output distribution (model and version, decoding parameters, ``max_steps``, tool versions,
  other loaded skills, and the data the draws read: the harness's ``baseline_context_hash``).
  Infra failures (``None``) are never cached: they are retried.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.fingerprint import fingerprint
from trm_assets.domain.ladder import GATE_RUN_MARK

CACHE_FORMAT: Final = "trm.baseline_cache/1"
GATE_BASELINE: Final = "gate_baseline"
LADDER_DRAW: Final = "ladder_draw"
STEP_ROLLOUT: Final = "step_rollout"
SLOW_EVAL: Final = "slow_eval"
PROVENANCES: Final[tuple[str, ...]] = (GATE_BASELINE, LADDER_DRAW, STEP_ROLLOUT, SLOW_EVAL)


class ProvenanceError(ValueError):
    """A baseline outcome whose origin makes it unusable as the gate's baseline (GATE §6.3 R1)."""


@dataclass(frozen=True, slots=True, order=True)
class BaselineKey:
    """The content address of one cached baseline draw (GATE §6.3 R2/R4)."""

    task_type: str
    skill_hash: str
    prompts_version: str
    qid: str
    replicate_idx: int
    context_hash: str = ""

    def __post_init__(self) -> None:
        if self.replicate_idx < 0:
            raise ValueError(f"replicate_idx must be >= 0, got {self.replicate_idx}")
        for name in ("task_type", "skill_hash", "prompts_version", "qid"):
            if not getattr(self, name):
                raise ValueError(f"BaselineKey.{name} must be non-empty")

    def as_list(self) -> list[Any]:
        return [
            self.task_type,
            self.skill_hash,
            self.prompts_version,
            self.qid,
            self.replicate_idx,
            self.context_hash,
        ]


@dataclass(frozen=True, slots=True)
class BaselineEntry:
    """One cached baseline outcome and where it came from."""

    key: BaselineKey
    correct: bool
    provenance: str
    run_id: str


def check_servable(entry: BaselineEntry, ladder_run_ids: Iterable[str] = ()) -> None:
    """Raise :class:`ProvenanceError` unless ``entry`` may serve as the gate's baseline (R1).

    ``ladder_run_ids`` are the runs whose draws built the current ladder; an entry from one of
    them is refused even if mislabelled.
    """
    if entry.provenance != GATE_BASELINE:
        raise ProvenanceError(
            f"baseline cache entry {entry.key.qid!r} (rep {entry.key.replicate_idx}) has "
            f"provenance "
            f"{entry.provenance!r}; only {GATE_BASELINE!r} draws may be the gate's baseline "
            "(GATE §6.3 R1: never reuse the draw that placed a question on the ladder)"
        )
    if GATE_RUN_MARK not in entry.run_id:
        raise ProvenanceError(
            f"baseline cache entry {entry.key.qid!r} comes from run {entry.run_id!r}, which is not "
            f"a gate run (no {GATE_RUN_MARK!r} in its id)"
        )
    if entry.run_id in set(ladder_run_ids):
        raise ProvenanceError(
            f"baseline cache entry {entry.key.qid!r} comes from run {entry.run_id!r}, "
            "one of the runs that built the ladder (GATE §6.3 R1)"
        )


def make_entry(
    key: BaselineKey, correct: bool | None, *, provenance: str, run_id: str
) -> BaselineEntry | None:
    """A cache entry for a fresh gate-baseline draw, or ``None`` for an infra failure (not cached).

    Any provenance other than ``gate_baseline`` is refused (:class:`ProvenanceError`).
    """
    if provenance not in PROVENANCES:
        raise ValueError(f"unknown provenance {provenance!r}; expected one of {PROVENANCES}")
    if correct is None:
        return None
    entry = BaselineEntry(key, correct, provenance, run_id)
    check_servable(entry)
    return entry


def lookup(
    entries: Mapping[BaselineKey, BaselineEntry],
    key: BaselineKey,
    ladder_run_ids: Iterable[str] = (),
) -> bool | None:
    """The cached outcome for ``key`` (``None`` = miss, run it); refuses an unservable entry."""
    entry = entries.get(key)
    if entry is None:
        return None
    if entry.key != key:
        raise ValueError(f"cache map is inconsistent: {key!r} maps to an entry for {entry.key!r}")
    check_servable(entry, ladder_run_ids)
    return entry.correct


def _rows(entries: Iterable[BaselineEntry]) -> list[list[Any]]:
    return [
        [*e.key.as_list(), e.correct, e.provenance, e.run_id]
        for e in sorted(entries, key=lambda e: e.key)
    ]


def cache_to_dict(entries: Iterable[BaselineEntry]) -> dict[str, Any]:
    """JSON-ready cache file body (rows sorted by key) with a fingerprint."""
    rows = _rows(entries)
    return {"format": CACHE_FORMAT, "entries": rows, "fingerprint": fingerprint(rows)}


def cache_from_dict(
    data: Mapping[str, Any], source: str = "baseline_cache.json"
) -> dict[BaselineKey, BaselineEntry]:
    """Load the cache; refuses another format, malformed rows, a duplicate key, an entry that is not
    a gate-baseline draw (R1) and a fingerprint mismatch, naming the row."""
    if data.get("format") != CACHE_FORMAT:
        raise DataFormatError(
            source, None, "format", f"{CACHE_FORMAT!r}, got {data.get('format')!r}"
        )
    rows = data.get("entries")
    if not isinstance(rows, list):
        raise DataFormatError(source, None, "entries", "a list of rows")
    out: dict[BaselineKey, BaselineEntry] = {}
    for i, row in enumerate(rows):
        try:
            task_type, skill_hash, prompts_version, qid, rep, ctx, correct, prov, run_id = row
            if not isinstance(rep, int) or isinstance(rep, bool) or not isinstance(correct, bool):
                raise ValueError("replicate_idx must be an int and correct a bool")
            key = BaselineKey(
                str(task_type), str(skill_hash), str(prompts_version), str(qid), rep, str(ctx)
            )
            entry = BaselineEntry(key, correct, str(prov), str(run_id))
            check_servable(entry)
        except (TypeError, ValueError) as exc:
            raise DataFormatError(
                source, f"row {i}", "entries", f"a servable cache row ({exc})"
            ) from exc
        if key in out:
            raise DataFormatError(source, f"row {i}", "entries", f"unique keys, {key!r} repeats")
        out[key] = entry
    if data.get("fingerprint") != fingerprint(_rows(out.values())):
        raise DataFormatError(
            source, None, "fingerprint", "the stored fingerprint (file edited or corrupted)"
        )
    return out
