"""The persisted information ladder (``ladder.json``; SPEC 5.5, fidelity #6).

The kernel (:mod:`trm_assets.domain.ladder`) owns the math and the format; this module owns the
file: written atomically (temp + ``os.replace``), loaded with the validation pool's expected
fingerprint — a mismatch (another pool, other ladder params, an edited file) raises
:class:`~trm_assets.domain.errors.DataFormatError` instead of silently rebuilding.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.ladder import (
    Ladder,
    LadderParams,
    ladder_from_dict,
    ladder_pool_fingerprint,
    ladder_to_dict,
)
from trm_assets.harness.storage.atomic import atomic_write_json, read_json_object


def load_ladder(path: Path, validation: Mapping[str, str], params: LadderParams) -> Ladder | None:
    """The ladder at ``path`` for this validation pool (qid → task type), or None if absent."""
    data = read_json_object(path)
    if data is None:
        return None
    return ladder_from_dict(
        data,
        expected_pool_fingerprint=ladder_pool_fingerprint(validation, params),
        source=str(path),
    )


def save_ladder(path: Path, ladder: Ladder) -> None:
    atomic_write_json(path, ladder_to_dict(ladder))


def load_written_ladder(path: Path, validation: Mapping[str, str], params: LadderParams) -> Ladder:
    """The ladder after the init unit wrote it: a missing file is an error, not a new ladder —
    a cold ladder rebuilt mid-training orders the gates differently than the run it resumes
    (review of bad inputs: 1,028 rollouts instead of 878, other gate evidence)."""
    existing = load_ladder(path, validation, params)
    if existing is None:
        raise DataFormatError(
            str(path),
            None,
            None,
            "the information ladder the init unit wrote (it is missing; it holds every "
            "rollout's outcome so far and cannot be rebuilt identically: restore it from a "
            "backup, or start a new workspace)",
        )
    return existing
