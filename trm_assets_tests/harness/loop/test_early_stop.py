"""Early stop in the harness (SPEC 5.6 step 9), against the rule computed from the checkpoint's
own record (audit: disabling it left every loop, CLI and checkpoint test passing; only the
planner's walk over a hand-set flag was tested). The rule: an epoch whose best (skills, prompts,
validation accuracy) is the one it started with counts one more epoch without improvement;
``patience`` of them in a row stop training after that epoch, and finalize delivers best."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from trm_assets.cli.train import train_cmd
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def test_training_stops_after_patience_epochs_without_a_better_best(tmp_path: Path) -> None:
    cfg = tiny_config("epochs=4", "patience=1")
    ws = new_workspace(tmp_path / "ws", cfg)
    res = CliRunner().invoke(
        train_cmd, ["--workspace", str(ws), "--config", str(ws / "config.yaml"), "--no-dagster"]
    )
    assert res.exit_code == 0, res.output
    state = json.loads((ws / "state.json").read_text(encoding="utf-8"))

    def triple(best: dict[str, object]) -> tuple[object, ...]:
        return (best["skills_version"], best["prompts_version"], best["val_accuracy"])

    before, without, stop_at = triple(state["seed_eval"]), 0, None
    for h in state["history"]:
        now = triple(h["best"])
        without = 0 if now != before else without + 1
        want = without >= cfg.patience
        assert h["early_stopped"] == want, (h["epoch"], now, before)
        if want and stop_at is None:
            stop_at = h["epoch"]
        before = now
    # the case this test is for: the stop came before the last configured epoch
    assert stop_at is not None and stop_at < cfg.epochs - 1
    assert [h["epoch"] for h in state["history"]] == list(range(stop_at + 1))
    assert state["early_stopped"] and state["finalized"]
    assert "done (early_stopped)" in res.output
