"""Issue 18.3: a run whose every model call fails must not report success.

With the endpoint refusing connections (a port nothing listens on) and no retries, `trm train`
used to exit 0, print "done (early_stopped)" and finalize a workspace of infra failures. Now the
first barrier that is mostly infra failures stops the unit before its checkpoint: exit code ≠ 0,
an `error:` line naming the cause and the fix, no finalize, and the workspace stays resumable.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from trm_assets_tests.tiny import REPO, tiny_config
from trm_bench.overhead import new_workspace


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: every connect is refused
    return int(port)


def _train_against_a_dead_endpoint(ws: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """`trm train --no-dagster` with the endpoint refusing connections and no retries."""
    env = {
        **os.environ,
        "TRM_LLM_BASE_URL": f"http://127.0.0.1:{_dead_port()}/v1",
        "TRM_LLM_API_KEY": "sk-test-outage",
        "TRM_LLM_MAX_RETRIES": "0",
        "TRM_LLM_TIMEOUT_S": "2",
    }
    args = [
        sys.executable, "-m", "trm_assets.cli", "train", "--workspace", str(ws),
        "--config", str(config), "--no-dagster",
    ]  # fmt: skip
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def test_an_outage_fails_the_run_and_leaves_it_resumable(tmp_path: Path) -> None:
    cfg = tiny_config(
        "llm_provider=openai", "agent_model=m", "evolve_model=m", "ground_truth=", "gate_passes=1",
        "val_size=48", "concurrency=1",
    )  # fmt: skip
    ws = new_workspace(tmp_path / "ws", cfg)
    proc = _train_against_a_dead_endpoint(ws, ws / "config.yaml")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "error:" in proc.stderr and "infrastructure" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "sk-test-outage" not in proc.stdout + proc.stderr
    assert "early_stopped" not in proc.stdout and "delivered best" not in proc.stdout
    state = ws / "state.json"
    assert not state.exists() or not json.loads(state.read_text())["finalized"]
    # init's 48 rollouts were given up after 24 failed in a row (the window's 20 beyond the 4
    # in flight), not at the barrier's end (a hanging server costs each rollout its timeout and
    # retries: hours for a real pool)
    assert "24 rollouts in a row (the barrier was given up before its end)" in proc.stderr
    from trm_assets.harness.storage.runlog import RunLogReader

    with RunLogReader.open(ws / "runs.duckdb") as r:
        (run,) = r.query("SELECT run_id, status FROM runs")
        ended = r.query(
            "SELECT count(*) AS n FROM predictions WHERE failure_kind = 'infra' "
            "AND error NOT LIKE 'aborted%'"
        )[0]["n"]
    assert run == {"run_id": "train_init", "status": "outage"} and ended == 24


def test_a_small_unit_of_an_unreachable_endpoint_is_not_a_result(tmp_path: Path) -> None:
    """The repository's real-model config has units of fewer than 10 rollouts (4 validation
    questions at init): the window never filled, so `trm train` checkpointed init and step 0 with
    accuracy n/a and (through Dagster, one process per run) finalized them with exit 0."""
    from trm_assets.harness.data.config import load_config

    config = REPO / "data" / "configs" / "real-model.yaml"
    cfg = load_config(config)
    assert cfg.val_size < 10  # the case: init's barrier is below the window's minimum
    ws = new_workspace(tmp_path / "ws", cfg)
    proc = _train_against_a_dead_endpoint(ws, config)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"every one of the last {cfg.val_size} rollout(s) failed" in proc.stderr
    assert "init:" not in proc.stdout  # the first unit stopped before its checkpoint
    assert not (ws / "state.json").exists()


def _outage_after(simulated: bool, *barriers: list[tuple[int, bool, str]]) -> str | None:
    """Feed barriers of rollouts (model calls, infra failure, stop) to the outage guard of a
    fresh context (its window empty, as in a new Dagster run); the message, or None."""
    from collections import deque
    from types import MethodType, SimpleNamespace

    from trm_assets.harness.loop.context import InfraOutage, LoopContext

    cfg = tiny_config()
    fake: Any = SimpleNamespace(
        cfg=cfg,
        providers=SimpleNamespace(simulated=simulated),
        _recent_infra=deque(maxlen=cfg.infra_outage_window),
        _log=None,
    )
    fake._outage = MethodType(LoopContext._outage, fake)
    try:
        for i, rollouts in enumerate(barriers):
            preds = [
                SimpleNamespace(
                    n_llm_calls=calls,
                    failure_kind="infra" if infra else ("task" if stop != "answer" else None),
                    error="infra: timeout" if infra else None,
                )
                for calls, infra, stop in rollouts
            ]
            result: Any = SimpleNamespace(run_id=f"r{i}", predictions=preds)  # the fields read
            LoopContext._check_outage(fake, result, "seed_eval")
    except InfraOutage as e:
        return str(e)
    return None


def test_a_small_window_stops_only_when_every_rollout_failed_for_infra() -> None:
    """Review of the first small-window rule (every *call* failed): one fresh rollout whose only
    call failed, beside rollouts served from the temperature-0 cache (0 calls) or ended by a
    context overflow, stopped the unit; a rollout whose first call succeeded and whose second
    failed did not, so a unit of such rollouts was still checkpointed with accuracy n/a."""
    cached, answered = (0, False, "answer"), (1, False, "answer")
    overflow, dead, died_late = (0, False, "context_length"), (0, True, "error"), (1, True, "error")
    assert _outage_after(False, [cached, cached, cached, dead]) is None
    assert _outage_after(False, [overflow, overflow, dead]) is None
    assert _outage_after(False, [answered], [dead]) is None
    msg = _outage_after(False, [died_late, died_late])
    assert msg is not None and msg.startswith("every one of the last 2 rollout(s) failed")
    assert "TRM_LLM_BASE_URL" in msg
    assert _outage_after(False, [dead]) is not None  # an unreachable endpoint, one rollout
    # the simulated world draws the same faults on every attempt: a small unit never stops (it
    # would stop again at each resume); ten rollouts decide by the share of failed calls
    assert _outage_after(True, [dead, dead]) is None
    big = _outage_after(True, [dead] * 10)
    assert big is not None and big.startswith("10 of the last 10 model calls failed")
    assert "sim.fault_*_rate" in big and "TRM_LLM_BASE_URL" not in big


def test_a_real_endpoint_counts_lost_rollouts_over_the_whole_barrier() -> None:
    """Hostile pass: a gateway answering 502 to every request over 13 kB failed 66 of 72 seed
    rollouts at their fourth call (3 good calls each): 66 failed calls of 264 stayed under the
    rate, and init was checkpointed with val 0.500 on the 6 rollouts left (the truth: 0.403).
    And the window held only the barrier's last 20 rollouts: an endpoint that recovered late in
    a barrier left a result of its last third."""
    long_lost, answered = (3, True, "error"), (4, False, "answer")
    msg = _outage_after(False, [long_lost] * 66 + [answered] * 6)
    assert msg is not None and msg.startswith("66 of the last 72 rollouts failed"), msg
    msg = _outage_after(False, [long_lost] * 40 + [answered] * 32)
    assert msg is not None and msg.startswith("40 of the last 72 rollouts failed"), msg
    assert _outage_after(False, [long_lost] * 36 + [answered] * 36) is None  # at the rate: data
    # the simulated world still counts calls (per-call fault draws, no retry): 66 of 264
    assert _outage_after(True, [long_lost] * 66 + [answered] * 6) is None
    # gate blocks smaller than the window are watched over the window, across barriers
    block = [long_lost] * 3 + [answered] * 2
    assert _outage_after(False, [answered] * 5, block, block, block) is None  # 9 of 20
    msg = _outage_after(False, [answered] * 5, block, block, block, block)
    assert msg is not None and msg.startswith("12 of the last 20 rollouts failed"), msg


def test_an_eval_during_an_outage_is_not_reused_nor_promoted(tmp_path: Path) -> None:
    """Hostile pass: `trm eval` with every rollout failed exited 0 with "accuracy None" and
    "promote with: …"; `trm promote` wrote a seed from it; and its run row said "done", so the
    same `trm eval` once the endpoint was back printed "already evaluated (reused)", for good."""
    from trm_assets_tests.reliability.conftest import child_env, run_cli, sim_server

    cfg = tiny_config("llm_provider=openai", "agent_temperature=1.0", "concurrency=4")
    ws = new_workspace(tmp_path / "ws", cfg)
    evaluate = ["eval", "--workspace", str(ws), "--version", "v1", "--pool", "test"]
    run_id = "eval_v1_v1_test"
    promote = [
        "promote", "--workspace", str(ws), "--version", "v1", "--eval-run", run_id,
        "--name", "s", "--seeds-dir", str(tmp_path / "seeds"),
    ]  # fmt: skip
    dead = child_env(
        TRM_LLM_BASE_URL=f"http://127.0.0.1:{_dead_port()}/v1",
        TRM_LLM_API_KEY="sk-test-outage",
        TRM_LLM_MAX_RETRIES="0",
    )
    res = run_cli(evaluate, dead, 240, tmp_path / "eval-dead.log")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "12 of the last 12 rollouts failed" in res.stderr
    assert "run the same `trm eval` again" in res.stderr and "promote with" not in res.stdout
    from trm_assets.harness.storage.runlog import RunLogReader

    with RunLogReader.open(ws / "runs.duckdb") as r:
        row = r.run(run_id)
    assert row is not None and row["status"] == "outage" and row["n_infra_failures"] == 12
    res = run_cli(promote, dead, 120, tmp_path / "promote-dead.log")
    assert res.returncode != 0 and "ended 'outage'" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "seeds" / "s").exists()

    with sim_server(tmp_path / "sim-serve.log", "--data", "data/smoke") as server:
        ok = child_env(TRM_LLM_BASE_URL=server.base_url, TRM_LLM_API_KEY="sk-test-outage")
        res = run_cli(evaluate, ok, 240, tmp_path / "eval-ok.log")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "already evaluated" not in res.stdout and "evaluating skills v1" in res.stdout
    with RunLogReader.open(ws / "runs.duckdb") as r:
        row = r.run(run_id)
        infra = r.query(
            f"SELECT count(*) AS n FROM predictions WHERE run_id = '{run_id}' "
            "AND failure_kind = 'infra'"
        )[0]["n"]
    assert row is not None and row["status"] == "done" and infra == 0
    assert row["n_rollouts"] == 12 and row["accuracy"] is not None
    assert f"run {run_id}: accuracy {row['accuracy']:.3f}" in res.stdout
    res = run_cli(promote, ok, 120, tmp_path / "promote-ok.log")
    assert res.returncode == 0 and (tmp_path / "seeds" / "s").is_dir(), res.stdout + res.stderr


def test_a_barrier_is_given_up_on_a_streak_of_lost_rollouts_only() -> None:
    """The in-barrier rule is a streak beyond the rollouts in flight: an endpoint that still
    answers now and then breaks it (the first rollouts to end are not a sample of the barrier);
    a blip that fails every rollout in flight at once does not stop a healthy endpoint (review:
    300 answered, 20 lost, 280 answered was given up at 320 of 600); and the simulated world,
    whose faults recur at each resume, is never given up on mid-barrier."""
    from types import MethodType, SimpleNamespace

    from trm_assets.harness.loop.context import InfraOutage, LoopContext

    def watcher(simulated: bool, concurrency: int) -> Any:
        cfg = tiny_config(f"concurrency={concurrency}")
        fake: Any = SimpleNamespace(cfg=cfg, providers=SimpleNamespace(simulated=simulated))
        fake._outage = MethodType(LoopContext._outage, fake)
        return LoopContext._outage_streak(fake, "train_e0_s0_R", "slow_R")

    lost = SimpleNamespace(failure_kind="infra", error="infra: timeout: no reply")
    answered = SimpleNamespace(failure_kind=None, error=None, empty_reply=False)
    assert tiny_config().infra_outage_window == 20
    blip = watcher(False, 8)  # 20 + 8 × 4 in flight = 52 in a row
    for p in [answered] * 300 + [lost] * 20 + [answered] * 280:
        blip(p)
    watch = watcher(False, 4)  # 20 + 4 × 4 = 36 in a row
    for p in [lost] * 35 + [answered] + [lost] * 35:
        watch(p)  # never 36 in a row
    try:
        watch(lost)
    except InfraOutage as e:
        assert str(e).startswith("36 rollouts in a row (the barrier was given up before its end)")
        assert "run train_e0_s0_R" in str(e) and "infra: timeout: no reply" in str(e)
    else:
        raise AssertionError("36 lost rollouts in a row did not stop the barrier")
    assert watcher(True, 4) is None
