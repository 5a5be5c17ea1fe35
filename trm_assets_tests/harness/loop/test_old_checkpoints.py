"""Issue 14: a ``state.json`` written before the typed records still loads and resumes.

The fixtures in ``old_checkpoints/`` are the checkpoints the untyped code wrote after units 0, 2,
10, 20 and 25 of the tiny run. The typed records write the very same JSON, except that
``epoch_counters`` now always holds every counter (the old dictionary created one on first count).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from trm_assets.harness.storage import checkpoint, workspace
from trm_assets.harness.storage.checkpoint import state_from_dict, state_to_dict
from trm_assets.harness.storage.records import EpochCounters, RunRef
from trm_assets_tests.harness.loop.conftest import digest, run_to_end
from trm_assets_tests.tiny import tiny_config

OLD = Path(__file__).parent / "old_checkpoints"
UNITS = (0, 2, 10, 20, 25)


def _old(unit: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((OLD / f"state_after_unit_{unit:03d}.json").read_text())
    return data


@pytest.mark.parametrize("unit", UNITS)
def test_an_old_checkpoint_loads_and_writes_the_same_json(unit: int) -> None:
    old = _old(unit)
    new = state_to_dict(state_from_dict(old))
    zero = state_to_dict(state_from_dict(_old(0)))["epoch_counters"]  # every counter at 0
    assert new["epoch_counters"] == {**zero, **old["epoch_counters"]}
    del new["epoch_counters"], old["epoch_counters"]
    assert new == old


def test_old_records_are_typed() -> None:
    state = state_from_dict(_old(10))  # after slow update 8 of epoch 0
    assert isinstance(state.slow.r, RunRef) and state.slow.r.n is not None
    assert state.slow.r2 is not None and state.slow.momentum is not None
    assert state.slow.report is None and state.history == ()
    assert state.epoch_counters == EpochCounters(
        accepted=3, gates=3, rolled_back=1, alpha_sum=old_alpha(10)
    )
    final = state_from_dict(_old(25))
    assert final.final is not None and final.final.reason == "completed"
    assert [h.epoch for h in final.history] == [0, 1]
    assert final.seed_eval is not None and final.seed_eval.run_id == "train_init"


def old_alpha(unit: int) -> float:
    value: float = _old(unit)["epoch_counters"]["alpha_sum"]
    return value


# the fixtures keep the config fingerprint of their time: a decision setting added since is drift
@pytest.mark.filterwarnings("ignore::trm_assets.harness.storage.checkpoint.ConfigDriftWarning")
@pytest.mark.parametrize("unit", [2, 10, 20])
def test_a_workspace_with_an_old_checkpoint_resumes_to_the_same_end(
    tiny_run: tuple[Path, list[Path]], tmp_path: Path, unit: int
) -> None:
    ws, snaps = tiny_run
    resumed = tmp_path / "ws"
    shutil.copytree(snaps[unit], resumed)
    shutil.copy(OLD / f"state_after_unit_{unit:03d}.json", resumed / "state.json")
    checkpoint._STATE_CACHE.clear()  # as a new process after the upgrade
    workspace._MANIFEST_CACHE.clear()
    run_to_end(resumed, tiny_config())
    got, want = digest(resumed), digest(ws)
    if (
        unit >= 20
    ):  # epoch 0's history entry was written before it named unevaluated types and settlements
        got_state = json.loads((resumed / "state.json").read_text())
        want_state = json.loads((ws / "state.json").read_text())
        assert want_state["history"][0].pop("unevaluated_types") == [
            "Information Synopsis",
            "Object Reasoning",
        ]
        assert want_state["history"][0].pop("probations")  # epoch 0 settled probations
        assert got_state == want_state
        del got["state.json"], want["state.json"]
    assert got == want
