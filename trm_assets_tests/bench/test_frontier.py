"""``trm bench frontier``: the acceptance of W − L ≥ k rules, computed from recorded gate
evidence, checked against hand counts and against the decisions the point rule took."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trm_assets_tests.tiny import SMOKE_CONFIG
from trm_bench.frontier import cli, frontier
from trm_bench.optimizer_run import RunSpec, execute


def gate(truth: str, wins: int, losses: int, delta: float, decided: bool = True) -> dict[str, Any]:
    return {"truth": truth, "wins": wins, "losses": losses, "delta": delta, "decided": decided}


RUNS = [
    {
        "policy": "full_val_point",
        "seed": 0,
        "gates": [
            gate("helpful", 5, 1, 0.04),  # W − L = 4
            gate("helpful", 3, 2, 0.02),  # 1
            gate("neutral", 2, 2, 0.0),  # 0
            gate("harmful", 4, 2, -0.03),  # 2
            gate("harmful", 9, 0, -0.01, decided=False),  # an abort: not counted
        ],
    },
    {"policy": "full_val_point", "seed": 1, "gates": [gate("helpful", 1, 3, 0.05)]},  # −2
    {"policy": "ce_gate", "seed": 0, "gates": [gate("helpful", 9, 0, 0.5)]},  # other policy
]


def test_rows_equal_hand_counts() -> None:
    t = frontier(RUNS, "full_val_point", [1, 2, 3, 5])
    assert t["runs"] == 2 and t["seeds"] == [0, 1]
    assert t["gated"] == {"helpful": 3, "neutral": 1, "harmful": 1}
    rows = {r["k"]: r for r in t["rows"]}
    assert rows[1]["accepted"] == {"helpful": 2, "neutral": 0, "harmful": 1}
    assert rows[2]["accepted"] == {"helpful": 1, "neutral": 0, "harmful": 1}
    assert rows[3]["accepted"] == {"helpful": 1, "neutral": 0, "harmful": 0}
    assert rows[5]["accepted"] == {"helpful": 0, "neutral": 0, "harmful": 0}
    assert rows[1]["rate"] == {"helpful": 2 / 3, "neutral": 0.0, "harmful": 1.0}
    assert rows[1]["harmful_per_run"] == 0.5
    assert rows[1]["true_delta_per_run_pp"] == pytest.approx(100 * (0.04 + 0.02 - 0.03) / 2)
    assert rows[3]["true_delta_per_run_pp"] == pytest.approx(100 * 0.04 / 2)


def test_refuses_records_without_evidence_and_unknown_policies(tmp_path: Path) -> None:
    no_evidence = {"truth": "helpful", "decided": True}
    old = [{"policy": "full_val_point", "seed": 0, "gates": [no_evidence]}]
    with pytest.raises(ValueError, match="wins/losses"):
        frontier(old, "full_val_point", [1])
    f = tmp_path / "runs.json"
    f.write_text(json.dumps(RUNS))
    res = CliRunner().invoke(cli, [str(f), "--policy", "minibatch_sum"])
    assert res.exit_code != 0 and "no runs of policy 'minibatch_sum'" in res.output
    res = CliRunner().invoke(cli, [str(f), "--max-k", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == frontier(RUNS, "full_val_point", [1, 2])
    # the benchmark's partial file (one record per line) reads the same
    part = tmp_path / "runs.json.partial.jsonl"
    part.write_text("".join(json.dumps(r) + "\n" for r in RUNS))
    res = CliRunner().invoke(cli, [str(part), "--max-k", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == frontier(RUNS, "full_val_point", [1, 2])
    bogus = [{"policy": "full_val_point", "seed": 0, "gates": [gate("bogus", 3, 0, 0.1)]}]
    undecided = [
        {"policy": "full_val_point", "seed": 0, "gates": [gate("helpful", 3, 0, 0.1, False)]}
    ]
    for bad, message in (
        ([1, 2], "run records"),
        ({"policy": "full_val_point"}, "JSON list"),
        (bogus, "unknown ground truth ['bogus']"),
        (undecided, "hold no decided gate"),
        ([{"policy": "full_val_point", "seed": 0}], "missing field 'gates'"),
    ):
        f.write_text(json.dumps(bad))
        res = CliRunner().invoke(cli, [str(f)])
        assert res.exit_code == 1 and message in res.output, (bad, res.output)


def test_recorded_evidence_is_the_point_rules(tmp_path: Path) -> None:
    """full_val_point accepts exactly when W > L: the recorded wins/losses are its evidence, and
    the frontier's k = 1 row counts exactly its accepted proposals."""
    tiny = ("epochs=1", "steps_per_epoch=2", "concurrency=4")
    run = execute(RunSpec("full_val_point", 0, 400, str(SMOKE_CONFIG), tiny)).to_dict()
    decided = [g for g in run["gates"] if g["decided"]]
    assert decided, "the run gated nothing"
    assert any(g["wins"] + g["losses"] > 0 for g in decided)
    for g in decided:
        assert (g["action"] == "accept") == (g["wins"] > g["losses"]), g
    row = frontier([run], "full_val_point", [1])["rows"][0]
    for truth, n in row["accepted"].items():
        assert n == sum(1 for g in decided if g["truth"] == truth and g["action"] == "accept")
