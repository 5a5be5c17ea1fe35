"""The on-disk BaselineCache (SPEC 5.4, GATE §6.3): one file per task type under
``<workspace>/baseline_cache/``.

Provenance rules come from the kernel (:mod:`trm_assets.domain.baseline_cache`): only gate-baseline
draws are stored or served (R1), the key carries the replicate (R2) and a context hash (R4),
infra failures are never cached. This module adds the storage rule: **the disk write succeeds
before memory is updated** (:meth:`BaselineCacheStore.put_many`), so a crash can never leave an
entry in memory that a resumed process would not see.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from trm_assets.domain.baseline_cache import (
    BaselineEntry,
    BaselineKey,
    cache_from_dict,
    cache_to_dict,
    lookup,
)
from trm_assets.harness.storage.atomic import atomic_write_json, file_identity, read_json_object


def _slug(task_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", task_type.lower()).strip("-") or "task"


# path → (file identity, parsed entries): a unit opens every type's file (purge) and each gate
# its own; an unchanged file is not parsed again (an atomic write changes the identity)
_PARSED: dict[Path, tuple[tuple[int, int, int], dict[BaselineKey, BaselineEntry]]] = {}


def read_cache_file(path: Path) -> dict[BaselineKey, BaselineEntry]:
    """One task type's cache file ({} when absent); a corrupt file is a :class:`DataFormatError`
    naming it (never a raw JSON traceback). The result is a fresh dict (the caller may change
    it); its entries are immutable."""
    key = file_identity(path)
    if key is None:
        return {}
    hit = _PARSED.get(path.absolute())
    if hit is not None and hit[0] == key:
        return dict(hit[1])
    data = read_json_object(path)
    entries = {} if data is None else cache_from_dict(data, str(path))
    _PARSED[path.absolute()] = (key, entries)
    return dict(entries)


class BaselineCacheStore:
    """The cache of one task type; ``entries`` mirrors the file exactly."""

    def __init__(self, directory: Path, task_type: str) -> None:
        self.task_type = task_type
        self.path = directory / f"{_slug(task_type)}.json"
        self.entries: dict[BaselineKey, BaselineEntry] = self._read()

    def _read(self) -> dict[BaselineKey, BaselineEntry]:
        return read_cache_file(self.path)

    def get(self, key: BaselineKey, ladder_run_ids: Iterable[str] = ()) -> bool | None:
        """The cached outcome (None = miss); an unservable entry raises (R1)."""
        return lookup(self.entries, key, ladder_run_ids)

    def put_many(self, new: Iterable[BaselineEntry]) -> int:
        """Add entries: write the whole file atomically first, then update memory."""
        merged = dict(self.entries)
        added = 0
        for e in new:
            if e.key not in merged:
                merged[e.key] = e
                added += 1
        if added:
            atomic_write_json(self.path, cache_to_dict(merged.values()))  # disk first …
            self.entries = merged  # … memory second
        return added

    def purge_runs(self, run_prefix: str) -> int:
        """Drop entries written by runs whose id starts with ``run_prefix`` (a unit of work that
        was killed half-way is re-run from its checkpoint with the cache it had then)."""
        kept = {k: e for k, e in self.entries.items() if not e.run_id.startswith(run_prefix)}
        dropped = len(self.entries) - len(kept)
        if dropped:
            atomic_write_json(self.path, cache_to_dict(kept.values()))
            self.entries = kept
        return dropped


def purge_cache_runs(directory: Path, run_prefix: str) -> int:
    """:meth:`BaselineCacheStore.purge_runs` over every task type's file."""
    if not directory.is_dir():
        return 0
    total = 0
    for path in sorted(directory.glob("*.json")):
        entries = read_cache_file(path)
        kept = [e for e in entries.values() if not e.run_id.startswith(run_prefix)]
        if len(kept) != len(entries):
            atomic_write_json(path, cache_to_dict(kept))
            total += len(entries) - len(kept)
    return total
