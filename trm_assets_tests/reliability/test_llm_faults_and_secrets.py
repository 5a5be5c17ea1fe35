"""LLM faults and secret hygiene (issue 9) through the real OpenAI-compatible path.

``trm sim-serve`` injects timeouts (10 %), HTTP 5xx (5 %) and malformed replies (5 %); the
provider gets no retry (``TRM_LLM_MAX_RETRIES=0``) so infrastructure failures reach the loop and
the INFRA guard (GATE §5) has work to do. The run must complete, no gate may decide on an
INFRA-aborted gate, and the failures must be counted. Without retries these rates lose 40-60% of
the rollouts, which the unit's own outage guard (``infra_outage_rate``, tested in
``test_infra_outage.py``) would rightly call an outage: this drill turns it off (rate 1.0) to
study the gate's guard. The same run carries a fake API key in its
environment: the key must appear nowhere — workspace, DuckDB files, DAGSTER_HOME, captured logs.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trm_assets.cli.report import report_data
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets_tests.reliability.conftest import child_env, sim_server
from trm_assets_tests.tiny import REPO, SMOKE_CONFIG, TINY, tiny_config
from trm_bench.overhead import new_workspace
from trm_bench.reliability import train_args

FAKE_KEY = "sk-trm-FAKE-9f3c1d2e7a5b4c6d8e0f-do-not-leak"
DRILL = ("llm_provider=openai", "agent_temperature=1.0", "concurrency=8", "infra_outage_rate=1.0")
OPENAI = (*TINY, *DRILL)
FAULTS = (
    "--fault-timeout-rate", "0.10", "--fault-5xx-rate", "0.05", "--fault-malformed-rate", "0.05",
    "--timeout-sleep-s", "0.5", "--seed", "3", "--log-requests",
)  # fmt: skip
_DAGSTER_CHILD = (
    "import sys, dagster as dg; "
    "from trm_assets.defs.driver import drive, ensure_dagster_home; "
    "from trm_assets.defs.resources import TrmResource; "
    "ensure_dagster_home(); "
    "trm = TrmResource(workspace=sys.argv[1], config_path=sys.argv[2], overrides=sys.argv[3:]); "
    "inst = dg.DagsterInstance.get(); "
    "s = drive(trm, inst, echo=print, max_runs=2); print('dagster runs', s.runs)"
)


@dataclass
class FaultRun:
    workspace: Path
    dagster_workspace: Path
    dagster_home: Path
    logs: list[Path]
    train_rc: int
    train_out: str
    dagster_rc: int


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRun]:
    import subprocess

    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)
    root = tmp_path_factory.mktemp("faults")
    cfg = tiny_config(*DRILL)
    ws = new_workspace(root / "ws", cfg)
    dws = new_workspace(root / "ws_dagster", cfg)
    home = root / "dagster_home"
    logs = [root / "sim-serve.log", root / "train.log", root / "dagster.log"]
    with sim_server(logs[0], "--data", "data/smoke", *FAULTS) as server:
        env = child_env(
            TRM_LLM_BASE_URL=server.base_url,
            TRM_LLM_API_KEY=FAKE_KEY,
            TRM_LLM_TIMEOUT_S="0.2",
            TRM_LLM_MAX_RETRIES="0",
            DAGSTER_HOME=str(home),
        )
        train = subprocess.run(
            train_args(ws, SMOKE_CONFIG, OPENAI, resume=False),
            cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        logs[1].write_text(train.stdout + train.stderr, encoding="utf-8")
        dag = subprocess.run(
            [sys.executable, "-c", _DAGSTER_CHILD, str(dws), str(SMOKE_CONFIG), *OPENAI],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        logs[2].write_text(dag.stdout + dag.stderr, encoding="utf-8")
    yield FaultRun(ws, dws, home, logs, train.returncode, train.stdout, dag.returncode)
    mp.undo()


def _rows(ws: Path, sql: str) -> list[dict[str, Any]]:
    with RunLogReader.open(ws / "runs.duckdb") as r:
        return r.query(sql)


def test_fault_run_completes_and_counts_infra_failures(fault_run: FaultRun) -> None:
    assert fault_run.train_rc == 0, fault_run.logs[1].read_text(encoding="utf-8")[-3000:]
    assert "done (" in fault_run.train_out
    state = json.loads((fault_run.workspace / "state.json").read_text(encoding="utf-8"))
    assert state["finalized"]
    ws = fault_run.workspace
    # every infra failure is a prediction row with failure_kind 'infra', and the runs table counts
    # exactly those (one row per rollout: none lost to a failed call)
    per_run = _rows(
        ws,
        "SELECT r.run_id, r.n_infra_failures AS counted, r.n_rollouts, "
        "count(*) FILTER (WHERE p.failure_kind = 'infra') AS infra, count(p.run_id) AS rows "
        "FROM runs r LEFT JOIN predictions p USING (run_id) "
        "GROUP BY r.run_id, r.n_infra_failures, r.n_rollouts",
    )
    assert sum(int(r["infra"]) for r in per_run) > 0  # the faults reached the loop
    for r in per_run:
        assert r["counted"] == r["infra"] and r["n_rollouts"] == r["rows"], r
    # the epoch reports count the INFRA-aborted gates
    aborted = _rows(ws, "SELECT epoch FROM step_report WHERE action = 'abort'")
    assert sum(h["aborted"] for h in state["history"]) == len(aborted) > 0


def test_no_verdict_on_an_infra_aborted_gate(fault_run: FaultRun) -> None:
    cfg = tiny_config("llm_provider=openai", "agent_temperature=1.0")
    ws = fault_run.workspace
    blocks = _rows(
        ws,
        "SELECT gate_run_id, block, verdict, infra, attempted, infra_rate FROM gate_evidence "
        "WHERE row_kind = 'block' ORDER BY gate_run_id, block",
    )
    assert blocks
    guarded = 0
    for b in blocks:  # GATE §5: the guard is evaluated after each block, before any verdict
        attempted, infra = int(b["attempted"]), int(b["infra"])
        assert math.isclose(float(b["infra_rate"]), infra / attempted if attempted else 0.0), b
        fires = (
            attempted >= cfg.gate_infra_min_denominator
            and infra / attempted > cfg.gate_infra_max_rate
        )
        assert (b["verdict"] == "INFRA") == fires, b  # INFRA exactly when the guard fires
        guarded += fires
    assert guarded > 0  # (this run's gates all abort; the kernel's tests cover the other side)
    last = {b["gate_run_id"]: b for b in blocks}  # the last block's decision is final
    reports = {
        r["gate_run_id"]: r
        for r in _rows(ws, "SELECT * FROM step_report WHERE gate_run_id IS NOT NULL")
    }
    for gate, b in last.items():
        rep = reports[gate]
        if b["verdict"] == "INFRA":
            assert rep["action"] == "abort" and rep["new_skills_version"] is None, rep
        else:
            assert rep["action"] in ("accept", "reject"), rep
    # an aborted gate leaves no blacklist entry and no new version (the store only grows by
    # accepts, rollbacks and slow-update versions)
    state = json.loads((ws / "state.json").read_text(encoding="utf-8"))
    aborted = {g for g, b in last.items() if b["verdict"] == "INFRA"}
    entries = [e for v in state["rejected_buffer"].values() for e in v]
    assert not [e for e in entries if any(g in json.dumps(e) for g in aborted)]


def test_epoch_report_counts_infra_failed_rollouts(fault_run: FaultRun) -> None:
    state = json.loads((fault_run.workspace / "state.json").read_text(encoding="utf-8"))
    for h in state["history"]:
        glob = f"train_e{h['epoch']}_*"
        rows = _rows(
            fault_run.workspace,
            f"SELECT sum(n_infra_failures) AS n FROM runs WHERE run_id GLOB '{glob}'",
        )
        assert h["infra_failures"] == rows[0]["n"]
    assert sum(h["infra_failures"] for h in state["history"]) > 0
    # and `trm report` shows them (issue 9: "infra failures are counted in the reports"), with
    # the gates aborted on them, against the run log and the gates' own records
    reported = {e["epoch"]: e for e in report_data(fault_run.workspace)["epochs"]}
    assert set(reported) == {h["epoch"] for h in state["history"]}
    for h in state["history"]:
        e = h["epoch"]
        rows = _rows(
            fault_run.workspace,
            f"SELECT sum(n_infra_failures) AS n FROM runs WHERE run_id GLOB 'train_e{e}_*'",
        )
        aborted = _rows(
            fault_run.workspace,
            f"SELECT count(*) AS n FROM step_report WHERE epoch = {e} AND action = 'abort'",
        )
        assert reported[e]["infra_failures"] == rows[0]["n"]
        assert reported[e]["aborted"] == aborted[0]["n"]
    # the text report's last two columns, epoch by epoch (review: only a substring was checked)
    from click.testing import CliRunner

    from trm_assets.cli.report import report_cmd

    text = CliRunner().invoke(report_cmd, ["--workspace", str(fault_run.workspace)])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0].split()[-2:] == ["infra", "abort"]
    shown = {
        int(ln.split()[0]): [int(x) for x in ln.split()[-2:]] for ln in lines[1 : 1 + len(reported)]
    }
    assert shown == {e: [r["infra_failures"], r["aborted"]] for e, r in reported.items()}


def _files(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]


def test_api_key_never_written_anywhere(fault_run: FaultRun) -> None:
    assert fault_run.dagster_rc == 0, fault_run.logs[2].read_text(encoding="utf-8")[-3000:]
    assert (fault_run.dagster_workspace / "runs.duckdb").exists()
    scanned = (
        _files(fault_run.workspace)
        + _files(fault_run.dagster_workspace)
        + _files(fault_run.dagster_home)
        + fault_run.logs
    )
    assert any(p.suffix == ".duckdb" for p in scanned)
    assert any(p.is_relative_to(fault_run.dagster_home) for p in scanned)  # Dagster wrote here
    needles = [FAKE_KEY.encode(), FAKE_KEY[8:32].encode(), FAKE_KEY.encode("utf-16-le")]
    leaks = [str(p) for p in scanned for n in needles if n in p.read_bytes()]
    assert leaks == []
    # the server logged every request (--log-requests) without its Authorization header
    served = fault_run.logs[0].read_text(encoding="utf-8")
    assert "chat/completions" in served and "Bearer" not in served


def test_a_real_endpoints_gates_visit_the_pool_in_a_uniform_order(fault_run: FaultRun) -> None:
    """A real endpoint at temperature 1 never takes the ladder's order (its texts shift single
    answers: docs/decision-real-endpoint-uniform-order.md). Every gate of the loop records the
    uniform plan, and the positions it visited are the seeded permutation of its type's
    validation pool, cycled pass after pass, as computed here from the seed (the step's case pack
    holds diagnosis questions, so the whole pool). The pools are small (2 per type), so the
    plan-level test in test_gate_temperature is where the order is told from the ladder's."""
    from trm_assets.domain.pools import pools_from_dict
    from trm_assets.harness.data.dataset import load_dataset
    from trm_assets.harness.data.rng import rng_for
    from trm_assets.harness.loop.gate import passes_for

    ws, cfg = fault_run.workspace, tiny_config(*DRILL)
    pools = pools_from_dict(json.loads((ws / "pools.json").read_text(encoding="utf-8")))
    task = {q.question_id: q.task_type for q in load_dataset(cfg, with_trees=False).questions}
    gated = _rows(
        ws,
        "SELECT epoch, step, skill_file, task_type, gate_run_id, gate_order FROM step_report "
        "WHERE gate_run_id IS NOT NULL",
    )
    assert gated and {r["gate_order"] for r in gated} == {"uniform (real endpoint)"}
    checked = 0
    for g in gated:
        visited = [
            (str(r["question_id"]), int(r["replicate"]))
            for r in _rows(
                ws,
                "SELECT question_id, replicate FROM gate_evidence WHERE row_kind = 'question' "
                f"AND gate_run_id = '{g['gate_run_id']}' ORDER BY position",
            )
        ]
        pool = sorted(q for q in pools.validation if task[q] == g["task_type"])
        key = (g["epoch"], g["step"], g["skill_file"])
        rng = rng_for(cfg.seed, "gate_order", "real endpoint", *key)
        order = [pool[i] for i in rng.permutation(len(pool))]
        plan = [(q, rep) for rep in range(passes_for(cfg, len(pool))) for q in order]
        assert visited == plan[: len(visited)] and visited, g
        checked += 1
    assert checked == len(gated)
