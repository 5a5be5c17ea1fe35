"""`trm train --resume` on a finalized workspace (review of bad inputs): it resumed into nothing,
printing a raw ConfigDriftWarning with its source line and "0 Dagster run(s)"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trm_assets.cli import main
from trm_assets.harness.data.config import config_to_yaml
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def test_resuming_a_finalized_workspace_says_so(tmp_path: Path) -> None:
    cfg = tiny_config("epochs=1", "steps_per_epoch=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        summary = train(ctx)
    assert summary.state is not None and summary.state.finalized
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    before = (ws / "state.json").read_bytes()
    base = ["train", "--workspace", str(ws), "--config", str(config), "--resume", "--no-dagster"]

    done = CliRunner().invoke(main, base)
    assert done.exit_code == 0, done.output
    assert "nothing to do: training finished after 1 epoch(s) (completed)" in done.output

    more = CliRunner().invoke(main, [*base, "--epochs", "3"])
    assert more.exit_code == 2, more.output
    assert "finalized workspace does not train further" in more.output
    assert "Traceback" not in more.output and (ws / "state.json").read_bytes() == before

    # a changed decision knob warns as a line, not as Python's warning with its source line
    from trm_assets.cli.support import TopGroup
    from trm_assets.harness.storage.checkpoint import load_state

    group = TopGroup(name="t")

    @group.command("read")
    def read() -> None:  # smoke's gate_alpha is 0.10
        load_state(
            ws / "state.json", tiny_config("epochs=1", "steps_per_epoch=1", "gate_alpha=0.2")
        )

    res = CliRunner().invoke(group, ["read"])
    assert res.exit_code == 0, (res.output, res.exception)
    assert res.output.startswith("warning: ") and "resuming with the new values" in res.output
    assert "warnings.warn" not in res.output and ".py:" not in res.output


def test_trm_eval_reuses_a_run_only_from_the_same_model(tmp_path: Path) -> None:
    """`trm eval` reused a finished run by its id alone: under another simulated world it
    printed the first world's accuracy (review: 0.417 reused where 0.861 was expected)."""
    from trm_assets.harness.storage.runlog import RunLogReader, run_decoding

    cfg = tiny_config("epochs=1", "steps_per_epoch=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    base = ["eval", "--workspace", str(ws), "--version", "v1", "--pool", "test"]
    base += ["--config", str(config)]

    first = CliRunner().invoke(main, base)
    assert first.exit_code == 0 and "run eval_v1_v1_test:" in first.output, first.output
    other = CliRunner().invoke(main, [*base, "--set", "sim.ability=3"])
    assert other.exit_code == 0 and "already evaluated" not in other.output, other.output
    again = CliRunner().invoke(main, base)
    assert "run eval_v1_v1_test already evaluated (reused)" in again.output
    with RunLogReader.open(ws / "runs.duckdb") as reader:
        ids = reader.run_ids("eval_v1_v1_test*")
        decodings = {run_decoding(reader.run(i) or {}) for i in ids}
    assert len(ids) == 2 and len(decodings) == 2  # one run per model, each recording its own


def test_a_budget_finalized_workspace_refuses_a_larger_budget(tmp_path: Path) -> None:
    cfg = tiny_config("rollout_budget=150")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        summary = train(ctx)
    assert summary.state is not None and summary.state.final is not None
    assert summary.state.final.reason == "budget"
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    base = ["train", "--workspace", str(ws), "--config", str(config), "--resume", "--no-dagster"]
    same = CliRunner().invoke(main, base)
    assert same.exit_code == 0 and "nothing to do" in same.output and "(budget)" in same.output
    more = CliRunner().invoke(main, [*base, "--set", "rollout_budget=5000"])
    assert more.exit_code == 2 and "leaves room for more" in more.output, more.output


def test_a_bad_progress_cadence_stops_the_dagster_path_too(tmp_path: Path) -> None:
    """It was read only on the in-process path; through Dagster a junk value fell back to 10 s."""
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    res = CliRunner().invoke(
        main,
        ["train", "--workspace", str(ws), "--config", str(config)],
        env={"TRM_PROGRESS_EVERY_S": "abc", "DAGSTER_HOME": str(tmp_path / "dh")},
    )
    assert res.exit_code == 2 and "TRM_PROGRESS_EVERY_S: expected seconds > 0" in res.output
    assert not (ws / "state.json").exists()


def test_ctrl_c_without_dagster_says_where_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trm train --no-dagster` answered Ctrl-C with click's bare "Aborted!" and exit 1; through
    Dagster it says "interrupted during …" and exits 130 (hostile review)."""
    from trm_assets.harness.loop import runner

    cfg = tiny_config("epochs=1", "steps_per_epoch=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    run_action = runner.run_action

    def interrupted_at_the_step(ctx: Any, action: Any, **kw: Any) -> object:
        if action.kind == "step":
            raise KeyboardInterrupt
        return run_action(ctx, action, **kw)

    monkeypatch.setattr(runner, "run_action", interrupted_at_the_step)
    args = ["train", "--workspace", str(ws), "--config", str(config), "--no-dagster"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 130, res.output
    assert "interrupted during step (epoch 0, step 0); the workspace is at its last" in res.output
    assert "Aborted!" not in res.output
    assert json.loads((ws / "state.json").read_text())["initialized"] is True  # init landed


def test_dry_run_refuses_what_the_resume_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trm train --dry-run --set seed=5` on a workspace with a checkpoint printed a full estimate
    (from the old pools) for a run `--resume` refuses; and with the simulated world it failed on
    a malformed TRM_LLM_* setting the run never reads, after printing the estimate (review)."""
    cfg = tiny_config("epochs=1", "steps_per_epoch=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=1)  # init: a checkpoint exists
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    base = ["train", "--workspace", str(ws), "--config", str(config), "--dry-run"]

    changed = CliRunner().invoke(main, [*base, "--set", "seed=5"])
    assert changed.exit_code == 2, changed.output
    assert "different structural configuration" in changed.output
    assert f"seed: {cfg.seed} → 5)" in changed.output  # the key that changed, both values
    assert "pre-flight estimate" not in changed.output

    # the simulated world prices its estimate from TRM_LLM_PRICE_* (README), and a malformed
    # TRM_LLM_* setting its run never reads leaves the estimate unpriced, with a warning line
    monkeypatch.setenv("TRM_LLM_PRICE_PROMPT_PER_1K", "0.001")
    monkeypatch.setenv("TRM_LLM_PRICE_COMPLETION_PER_1K", "0.002")
    priced = CliRunner().invoke(main, base)
    assert priced.exit_code == 0 and "in the price unit of TRM_LLM_PRICE" in priced.output
    monkeypatch.setenv("TRM_LLM_TIMEOUT_S", "abc")
    fine = CliRunner().invoke(main, base)
    assert fine.exit_code == 0, fine.output
    assert "pre-flight estimate" in fine.output and "price unit" not in fine.output
    assert "warning: no prices in the estimate: TRM_LLM_TIMEOUT_S" in fine.output
    provider = ("llm_provider=openai", "agent_model=m", "evolve_model=m", "gate_passes=1")
    real = tiny_config("epochs=1", "steps_per_epoch=1", *provider)
    real_config = tmp_path / "real.yaml"
    real_config.write_text(config_to_yaml(real), encoding="utf-8")
    refused = CliRunner().invoke(main, [*base[:4], str(real_config), "--dry-run"])
    assert refused.exit_code == 2 and "TRM_LLM_TIMEOUT_S" in refused.output, refused.output
    assert "pre-flight estimate" not in refused.output  # the error before any estimate line


@pytest.mark.parametrize("path", ["--no-dagster", "dagster"])
def test_a_config_drift_is_told_once_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A resume with a changed decision setting printed the drift warning two (in process) or
    three (through Dagster) times, naming only two fingerprints (review)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    cfg = tiny_config("epochs=1", "steps_per_epoch=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=1)
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    args = ["train", "--workspace", str(ws), "--config", str(config), "--resume"]
    args += ["--set", "gate_alpha=0.2", *([path] if path.startswith("--") else [])]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    told = [line for line in res.output.splitlines() if "settings changed" in line]
    assert len(told) == 1, res.output
    assert f"(gate_alpha: {json.dumps(cfg.gate_alpha)} → 0.2)" in told[0]


def test_an_eval_between_units_stays_in_the_run_history(tmp_path: Path) -> None:
    """`trm eval` between two units of work recorded its run in the manifest's history; the
    next unit rolled the workspace back to its checkpoint's mark and dropped the record (it is
    not the killed unit's): the lineage of that evaluation was gone (review)."""
    cfg = tiny_config("epochs=1", "steps_per_epoch=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    config = tmp_path / "c.yaml"
    config.write_text(config_to_yaml(cfg), encoding="utf-8")
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=1)  # init
    args = ["eval", "--workspace", str(ws), "--version", "v1", "--pool", "validation"]
    res = CliRunner().invoke(main, [*args, "--config", str(config)])
    assert res.exit_code == 0, res.output

    def history() -> list[tuple[str, str | None]]:
        m = json.loads((ws / "manifest.json").read_text(encoding="utf-8"))
        return [(h["run_id"], h["kind"]) for h in m["history"]]

    before = history()
    assert before[-1] == ("eval_v1_v1_validation", "eval_validation")
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=1)  # the step: opens by rolling back to init's mark
    after = history()
    assert after[: len(before)] == before and len(after) > len(before)
