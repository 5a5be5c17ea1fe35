"""``trm bench gate`` (trm_assets/bench/gate.py) through click's CliRunner: the JSON contract."""

from __future__ import annotations

import json

from click.testing import CliRunner

from trm_bench.gate import EFFECTS, METHODS, SETTINGS, cli


def test_bench_json_contract() -> None:
    result = CliRunner().invoke(cli, ["--json", "--replicates", "40", "--seed", "3"])
    assert result.exit_code == 0, result.output
    cases = json.loads(result.output)["cases"]
    assert len(cases) == len(SETTINGS) * len(EFFECTS) * len(METHODS)
    for c in cases:
        assert {
            "pool",
            "ladder",
            "method",
            "effect",
            "accept_rate",
            "mean_candidate_rollouts",
        } <= set(c)
        assert c["pool"] in (150, 50) and c["ladder"] in ("warm", "cold") and c["effect"] in EFFECTS
        assert 0.0 <= c["accept_rate"] <= 1.0 and c["mean_candidate_rollouts"] >= 0
    gepa = [c for c in cases if c["method"] == "gepa_b3"]
    assert all(c["mean_candidate_rollouts"] == 3 for c in gepa)
    full = [c for c in cases if c["method"] == "full_val_point"]
    assert all(c["mean_candidate_rollouts"] == c["pool"] for c in full)
    # same seed, same numbers
    again = CliRunner().invoke(cli, ["--json", "--replicates", "40", "--seed", "3"])
    assert json.loads(again.output)["cases"] == cases


def test_bench_table_output() -> None:
    result = CliRunner().invoke(cli, ["--replicates", "10"])
    assert result.exit_code == 0, result.output
    assert "| hybrid |" in result.output and "Pool N = 150" in result.output
