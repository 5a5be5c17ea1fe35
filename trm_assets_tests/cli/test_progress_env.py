"""``TRM_PROGRESS_EVERY_S``: `trm train`'s progress cadence, an engineering variable."""

from __future__ import annotations

from pathlib import Path

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


def test_the_progress_cadence_is_read_from_dotenv_under_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Like the config and the TRM_LLM_* settings: `.env` in the current directory, the
    environment winning over it (a `.env` line was ignored)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRM_PROGRESS_EVERY_S", raising=False)
    (tmp_path / ".env").write_text("TRM_PROGRESS_EVERY_S=3.5\n", encoding="utf-8")
    assert progress_reporter().every_s == 3.5
    monkeypatch.setenv("TRM_PROGRESS_EVERY_S", "7")
    assert progress_reporter().every_s == 7.0
    (tmp_path / ".env").write_text("TRM_PROGRESS_EVERY_S=soon\n", encoding="utf-8")
    monkeypatch.delenv("TRM_PROGRESS_EVERY_S")
    with pytest.raises(TrmError, match="TRM_PROGRESS_EVERY_S: expected seconds > 0, got 'soon'"):
        progress_reporter()
