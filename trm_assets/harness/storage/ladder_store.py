"""The persisted information ladder (``ladder.json``; SPEC 5.5, fidelity #6).

The kernel (:mod:`trm_assets.domain.ladder`) owns the math and the format; this module owns the
file: written atomically (temp + ``os.replace``), loaded with the validation pool's expected
fingerprint — a mismatch (another pool, other ladder params, an edited file) raises
:class:`~trm_assets.domain.errors.DataFormatError` instead of silently rebuilding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.ladder import (
    Ladder,
    LadderParams,
    ladder_from_dict,
    ladder_pool_fingerprint,
    ladder_to_dict,
    new_ladder,
)
from trm_assets.harness.storage.atomic import atomic_write_json


def load_ladder(path: Path, validation: Mapping[str, str], params: LadderParams) -> Ladder | None:
    """The ladder at ``path`` for this validation pool (qid → task type), or None if absent."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataFormatError(str(path), f"line {e.lineno}", None, f"valid JSON ({e.msg})") from e
    if not isinstance(data, dict):
        raise DataFormatError(str(path), None, None, "a JSON object")
    return ladder_from_dict(
        data,
        expected_pool_fingerprint=ladder_pool_fingerprint(validation, params),
        source=str(path),
    )


def load_or_new_ladder(path: Path, validation: Mapping[str, str], params: LadderParams) -> Ladder:
    existing = load_ladder(path, validation, params)
    return existing if existing is not None else new_ladder(validation, params)


def save_ladder(path: Path, ladder: Ladder) -> None:
    atomic_write_json(path, ladder_to_dict(ladder))
