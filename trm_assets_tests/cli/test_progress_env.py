"""``TRM_PROGRESS_EVERY_S``: `trm train`'s progress cadence, an engineering variable."""

from __future__ import annotations

import pytest

from trm_assets.cli.train import progress_reporter
from trm_assets.domain.errors import TrmError


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "inf", "nan"])
def test_a_bad_progress_cadence_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("TRM_PROGRESS_EVERY_S", raw)
    with pytest.raises(TrmError, match=f"TRM_PROGRESS_EVERY_S: expected seconds > 0, got {raw!r}"):
        progress_reporter()


def test_the_progress_cadence_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRM_PROGRESS_EVERY_S", "2.5")
    assert progress_reporter().every_s == 2.5
