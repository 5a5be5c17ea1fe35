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

from trm_assets_tests.tiny import REPO, new_workspace, tiny_config


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: every connect is refused
    return int(port)


def test_an_outage_fails_the_run_and_leaves_it_resumable(tmp_path: Path) -> None:
    cfg = tiny_config(
        "llm_provider=openai", "agent_model=m", "evolve_model=m", "ground_truth=", "gate_passes=1"
    )
    ws = new_workspace(tmp_path / "ws", cfg)
    env = {
        **os.environ,
        "TRM_LLM_BASE_URL": f"http://127.0.0.1:{_dead_port()}/v1",
        "TRM_LLM_API_KEY": "sk-test-outage",
        "TRM_LLM_MAX_RETRIES": "0",
        "TRM_LLM_TIMEOUT_S": "2",
    }
    args = [
        sys.executable, "-m", "trm_assets.cli", "train", "--workspace", str(ws),
        "--config", str(ws / "config.yaml"), "--no-dagster",
    ]  # fmt: skip
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "error:" in proc.stderr and "infrastructure" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "sk-test-outage" not in proc.stdout + proc.stderr
    assert "early_stopped" not in proc.stdout and "delivered best" not in proc.stdout
    state = ws / "state.json"
    assert not state.exists() or not json.loads(state.read_text())["finalized"]


def test_a_small_unit_of_an_unreachable_endpoint_is_not_a_result(tmp_path: Path) -> None:
    """The repository's real-model config has units of fewer than 10 rollouts (4 validation
    questions at init): the window never filled, so `trm train` checkpointed init and step 0 with
    accuracy n/a and (through Dagster, one process per run) finalized them with exit 0."""
    from trm_assets.harness.data.config import load_config

    config = REPO / "data" / "configs" / "real-model.yaml"
    cfg = load_config(config)
    assert cfg.val_size < 10  # the case: init's barrier is below the window's minimum
    ws = new_workspace(tmp_path / "ws", cfg)
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
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{cfg.val_size} of the last {cfg.val_size} model calls failed" in proc.stderr
    assert "init:" not in proc.stdout  # the first unit stopped before its checkpoint
    assert not (ws / "state.json").exists()
