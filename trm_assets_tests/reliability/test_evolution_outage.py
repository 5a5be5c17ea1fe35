"""An evolution model that is down is an outage, not an empty proposal (hostile review, round two).

With the agent's endpoint answering and the evolve/diagnose model failing every call for
infrastructure reasons, `trm train` used to "complete" with exit 0: each step printed "skipped",
the slow update proposed nothing, and a resumed run differed from an uninterrupted one. On a real
endpoint a unit whose every evolution call failed now stops before its checkpoint (`--resume`
redoes it); one failed call among others stays an INFRA no-edit, and the simulated world's
injected faults stay results (`LoopContext.check_model_calls`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NoReturn

import pytest

from trm_assets.harness.loop import slow_update, step
from trm_assets.harness.loop.context import InfraOutage, loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.harness.storage.checkpoint import load_state
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.llm.factory import build_providers
from trm_assets.llm.protocol import InfraError
from trm_assets_tests.harness.loop.conftest import digest
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


async def _down_async(*args: Any, **kwargs: Any) -> NoReturn:
    raise InfraError("http_status", "HTTP 503 from the evolve model")


def _train(ws: Path, *, simulated: bool, max_units: int | None = None) -> None:
    cfg = tiny_config()
    providers = dataclasses.replace(build_providers(cfg.provider_spec()), simulated=simulated)
    with loop_context(ws, cfg, providers) as ctx:
        train(ctx, max_units=max_units)


@pytest.mark.parametrize("target", ["step", "momentum"])
def test_a_real_endpoint_failing_every_evolution_call_stops_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    cfg = tiny_config()
    ref = new_workspace(tmp_path / "ref", cfg)
    _train(ref, simulated=True)
    ws = new_workspace(tmp_path / "ws", cfg)
    if target == "momentum":  # the steps and the slow update's functions 1-5 run as usual
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            while (s := load_state(ctx.paths.state, cfg)) is None or s.slow_done < 5:
                train(ctx, max_units=1)
    before = load_state(ws / "state.json", cfg)
    with monkeypatch.context() as mp:
        if target == "step":
            mp.setattr(step, "evolve_single_skill", _down_async)
        else:
            mp.setattr(slow_update, "update_momentum", _down_async)
        with pytest.raises(InfraOutage) as err:
            _train(ws, simulated=False)
    what = "every evolution call of the step" if target == "step" else "every momentum call"
    assert what in str(err.value) and "HTTP 503 from the evolve model" in str(err.value)
    assert "trm train --resume" in str(err.value)
    after = load_state(ws / "state.json", cfg)
    if target == "step":  # init's checkpoint only: step 0 was stopped before its own
        assert after is not None and after.initialized and after.next_step == 0
        with RunLogReader.open(ws / "runs.duckdb") as r:
            assert r.query("SELECT count(*) AS n FROM step_report")[0]["n"] == 0
    else:  # the slow update stopped before function 6's checkpoint
        assert before is not None and after is not None
        assert (after.epoch, after.slow_done) == (before.epoch, before.slow_done) == (0, 5)
    _train(ws, simulated=True)  # the endpoint is back: --resume ends where the reference did
    assert digest(ws) == digest(ref)


def test_a_simulated_fault_stays_an_infra_no_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    said: list[str] = []
    with monkeypatch.context() as mp:
        mp.setattr(step, "evolve_single_skill", _down_async)
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            train(ctx, max_units=2, echo=said.append)  # init and step 0
    state = load_state(ws / "state.json", cfg)
    assert state is not None and state.next_step == 1
    with RunLogReader.open(ws / "runs.duckdb") as r:
        rows = r.query("SELECT action, verdict FROM step_report")
    lost = [row for row in rows if row["action"] not in ("cooldown", "no_failures", "gate_cap")]
    assert lost and all(row == {"action": "no_edit", "verdict": "INFRA"} for row in lost)
    line = next(x for x in said if "epoch 0 step 0:" in x and "accepted" in x)
    assert f"skipped {len(rows) - len(lost)}, evolution failed (infra) {len(lost)};" in line
