"""Issue 18.8: invalid ``TRM_LLM_*`` values are one ``error:`` line naming the variable.

Before: a bad ``TRM_LLM_TIMEOUT_S`` (or any ``TRM_LLM_*`` value) gave a 46-line pydantic
traceback, an infinite timeout passed, and a key with non-ASCII characters or a trailing newline
passed validation and failed inside the HTTP client on every call (nothing reached the server).
Now :mod:`trm_assets.llm.settings` refuses them, one line per variable, never echoing the key or
the URL; ``trm`` commands print those lines (exit code 2) before any rollout.

The research config's own non-finite numbers (``probation_rollback_margin: .inf``) are refused by
:class:`~trm_assets.harness.data.config.RunConfig` (``allow_inf_nan=False``); checked here too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trm_assets.cli.train import train_cmd
from trm_assets.harness.data.config import ConfigError
from trm_assets.llm.settings import SettingsError, load_settings
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace

KEY = "sk-live-0123456789abcdefXYZ"
#: A real-model config; nothing listens on port 9, and no call may be attempted.
OPENAI = ("llm_provider=openai", "gate_passes=1", "ground_truth=null")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return new_workspace(tmp_path / "ws", tiny_config(*OPENAI))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for k in list(os.environ):
        if k.startswith(("TRM_LLM_", "OPENAI_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("TRM_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TRM_LLM_MAX_RETRIES", "0")


def train(ws: Path) -> tuple[int, list[str], str]:
    res = CliRunner().invoke(
        train_cmd,
        ["--workspace", str(ws), "--config", str(ws / "config.yaml"), "--no-dagster"],
    )
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    return res.exit_code, errors, res.output


@pytest.mark.parametrize(
    ("variable", "value", "expect"),
    [
        ("TRM_LLM_TIMEOUT_S", "abc", "TRM_LLM_TIMEOUT_S: Input should be a valid number"),
        ("TRM_LLM_TIMEOUT_S", "inf", "TRM_LLM_TIMEOUT_S: Input should be a finite number"),
        ("TRM_LLM_MAX_RETRIES", "-1", "TRM_LLM_MAX_RETRIES: Input should be greater than"),
        ("TRM_LLM_MAX_CONCURRENCY", "lots", "TRM_LLM_MAX_CONCURRENCY: Input should be a valid"),
        ("TRM_LLM_TOOL_MODE", "magic", "TRM_LLM_TOOL_MODE: Input should be 'native' or 'text'"),
        (
            "TRM_LLM_BASE_URL",
            "ftp://files.example.com/v1",
            "TRM_LLM_BASE_URL: expected an http:// or https://",
        ),
        # hostile review: a query string swallowed the request path, and a token in it was shown
        (
            "TRM_LLM_BASE_URL",
            "http://127.0.0.1:9/v1?api-key=qqTOKENqq77",
            "TRM_LLM_BASE_URL: has a query string or fragment",
        ),
        # hostile review: a misspelled variable was ignored and the default used
        (
            "TRM_LLM_MAX_RETRY",
            "0",
            "TRM_LLM_MAX_RETRY: no such setting (did you mean TRM_LLM_MAX_RETRIES?)",
        ),
        ("TRM_LLM_API_KEY", KEY + "\n", "TRM_LLM_API_KEY (or OPENAI_API_KEY): contains whitespace"),
        (
            "OPENAI_API_KEY",
            "sk-\u201cquoted\u201d",
            "TRM_LLM_API_KEY (or OPENAI_API_KEY): contains",
        ),
    ],
)
def test_trm_train_prints_one_line_naming_the_variable(
    ws: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expect: str
) -> None:
    monkeypatch.setenv(variable, value)
    code, errors, output = train(ws)
    assert code == 2, output
    assert "Traceback" not in output and "validation error" not in output
    assert len(errors) == 1 and errors[0].startswith(f"error: {expect}"), output
    if "KEY" in variable or "URL" in variable:  # never echoed, not even in part
        assert value.strip()[3:] not in output
    assert not (ws / "state.json").exists() and not (ws / "runs.duckdb").exists()


def test_the_key_and_the_url_are_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRM_LLM_API_KEY", KEY + " ")
    monkeypatch.setenv("TRM_LLM_BASE_URL", "ftp://user:" + KEY + "@host/v1")
    with pytest.raises(SettingsError) as ei:
        load_settings(_env_file=None)
    text = str(ei.value)
    assert KEY not in text and "user" not in text
    assert [p.split(":")[0] for p in ei.value.problems] == [
        "TRM_LLM_API_KEY (or OPENAI_API_KEY)",
        "TRM_LLM_BASE_URL",
    ]
    assert "character(s) 28 of 28" in ei.value.problems[0]  # where, not what


def test_valid_settings_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("TRM_LLM_BASE_URL", "https://api.example.com/v1")
    s = load_settings(_env_file=None)
    assert s.api_key_value() == KEY and s.base_url == "https://api.example.com/v1"


def test_non_finite_config_numbers_are_refused_before_any_work() -> None:
    with pytest.raises(ConfigError, match="probation_rollback_margin"):
        tiny_config("probation_rollback_margin=.inf")


def test_a_long_value_in_a_shown_variable_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile pass: a key pasted into TRM_LLM_TIMEOUT_S was shown whole (values were cut at 40
    characters); a short bad value is still shown, as the user needs it."""
    monkeypatch.setenv("TRM_LLM_TIMEOUT_S", KEY)
    monkeypatch.setenv("TRM_LLM_TOOL_MODE", "natve")
    with pytest.raises(SettingsError) as ei:
        load_settings(_env_file=None)
    text = str(ei.value)
    assert KEY[3:9] not in text and f"a {len(KEY)}-character value, not shown" in text
    assert "(got 'natve')" in text


@pytest.mark.parametrize(
    ("variable", "value", "expect"),
    [
        ("TRM_LLM_BASE_URL", None, "llm_provider is 'openai' but TRM_LLM_BASE_URL is not set"),
        ("TRM_LLM_TOOLMODE", "text", "TRM_LLM_TOOLMODE: no such setting (did you mean"),
    ],
)
def test_the_dry_run_checks_the_endpoint_settings(
    ws: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str | None, expect: str
) -> None:
    """Hostile review: `trm train --dry-run` said nothing of a missing TRM_LLM_BASE_URL, which the
    real run then hit inside a Dagster run."""
    if value is None:
        monkeypatch.delenv(variable)
    else:
        monkeypatch.setenv(variable, value)
    res = CliRunner().invoke(
        train_cmd,
        ["--workspace", str(ws), "--config", str(ws / "config.yaml"), "--dry-run"],
    )
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert res.exit_code == 2 and len(errors) == 1, res.output
    assert errors[0].startswith(f"error: {expect}"), res.output
