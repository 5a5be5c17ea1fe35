"""Gate rollouts never feed the ladder, not even through the temperature-0 reuse (audit).

At temperature 0 the slow update's R serves a question whose prompt was already rolled out from
that earlier row — and after an accept, the accepted text's earlier rollouts are the gate's own
candidate rows. R's rows then carried gate outcomes into the ladder's p̂, past the anti-leak rule
that refuses gate runs by id. Here a realistic-world run (temperature 0) with ``full_val_point``
(its gates roll the candidate out over the type's whole pool) serves R rows from gates; the
ladder written at the end must equal the one folded from its sources without them, the served
rows found by SQL on the run log's reuse flags (independently of the code under test).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from trm_assets.cli.train import train_cmd
from trm_assets.domain.ladder import new_ladder, update_ladder
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.slow_update import served_from_gates
from trm_assets.harness.storage.ladder_store import load_written_ladder
from trm_assets.harness.storage.runlog import RunLog, RunLogReader
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def test_rows_served_from_gates_stay_out_of_the_ladder(tmp_path: Path) -> None:
    cfg = tiny_config(
        "sim.profile=realistic", "gate_passes=1", "val_size=72", "gate_policy=full_val_point"
    )
    ws = new_workspace(tmp_path / "ws", cfg)
    res = CliRunner().invoke(
        train_cmd, ["--workspace", str(ws), "--config", str(ws / "config.yaml"), "--no-dagster"]
    )
    assert res.exit_code == 0, res.output
    with RunLogReader.open(ws / "runs.duckdb") as r:
        flags = r.query("SELECT run_id, question_id, detail FROM flags WHERE kind = 'reuse'")
        gate_served: dict[str, set[str]] = {}
        for f in flags:
            if "_gate_" in json.loads(f["detail"])["from_run"]:
                gate_served.setdefault(f["run_id"], set()).add(f["question_id"])
        assert sum(len(v) for v in gate_served.values()) > 0  # the path exists in this run
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            tasks = {q: ctx.questions[q].task_type for q in ctx.pools.validation}
            written = load_written_ladder(ctx.paths.ladder, tasks, ctx.ladder_params())
            expected = new_ladder(tasks, ctx.ladder_params())
            assert any(run in gate_served for run in written.applied_runs)
            for run in written.applied_runs:
                assert "_gate_" not in run
                outcomes = {
                    q: v
                    for (q, rep), v in sorted(r.correctness(run).items())
                    if rep == 0 and q not in gate_served.get(run, set())
                }
                expected = update_ladder(expected, run, outcomes)
    assert written.entries == expected.entries


def test_a_chain_of_served_rows_is_followed_to_its_gate(tmp_path: Path) -> None:
    """R2 served from R, which was served from a gate: both rows are the gate's outcome."""
    import duckdb

    db = tmp_path / "runs.duckdb"
    RunLog.open(db).close()  # the run log's schema
    served = [
        ("t_e1_R", "q1", "t_e1_s0_gate_x_cand"),
        ("t_e1_R2", "q1", "t_e1_R"),
        ("t_e1_R2", "q2", "t_e1_R"),  # R's q2 was rolled out, not served
        ("t_e1_R2", "q3", "t_e0_R2"),
        ("t_e0_R2", "q3", "t_e0_s1_gate_y_cand"),
        ("t_e0_R2", "q4", "t_init"),
    ]
    with duckdb.connect(str(db)) as con:
        for run, qid, source in served:
            con.execute(
                "INSERT INTO flags (run_id, question_id, replicate, kind, name, detail) "
                "VALUES (?, ?, 0, 'reuse', 'same_prompt', ?)",
                [run, qid, json.dumps({"from_run": source})],
            )
    with RunLogReader.open(db) as r:
        from_gates = served_from_gates(r)
    assert from_gates.get("t_e1_R") == {"q1"}
    assert from_gates.get("t_e1_R2") == {"q1", "q3"}
    assert from_gates.get("t_e0_R2") == {"q3"}
    assert from_gates.get("t_e0_R", set()) == set()
