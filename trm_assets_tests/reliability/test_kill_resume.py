"""Kill-anywhere resume (issue 9, SPEC 5.7): ``trm bench reliability`` SIGKILLs a training run at
seeded random moments, resumes it (``trm train --resume`` or a Dagster re-launch) and compares
the final state with an uninterrupted run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import TINY
from trm_bench.reliability import (
    cli,
    digest_differences,
    final_digest,
    has_no_dagster_path,
    kill_points,
    leftover_paths,
)


def test_kill_points_are_seeded_and_stratified() -> None:
    a = kill_points(5, 10.0, seed=3)
    assert a == kill_points(5, 10.0, seed=3) and a != kill_points(5, 10.0, seed=4)
    assert all(2.0 * i < t < 2.0 * (i + 1) for i, t in enumerate(a))  # one per slice


def test_kill_anywhere_and_resume_is_identical(tmp_path: Path) -> None:
    """N = 5 kills of a 2-epoch run; seed 1 lands them in init/step 0, the slow update of epoch
    0, the two steps of epoch 1 and its slow update. Kill 3 resumes through the Dagster driver;
    the others through `trm train --resume`, alternating its default and --no-dagster paths when
    it has both. Every resumed run equals the uninterrupted one."""
    args = ["--kills", "5", "--json", "--seed", "1", "--dagster-every", "3", "--timeout", "240"]
    args += ["--workdir", str(tmp_path / "work")]
    for o in TINY:
        args += ["--set", o]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert set(report) == {"kills", "identical", "mismatches"}  # the --json contract
    assert report == {"kills": 5, "identical": 5, "mismatches": []}, res.stderr
    assert res.stderr.count("resumed via dagster") == 1
    if has_no_dagster_path():
        assert res.stderr.count("resumed via trm train --resume --no-dagster") == 2
    # the reference and the kept (identical) workspaces give the same digest
    ref = final_digest(tmp_path / "work" / "reference")
    for ws in sorted((tmp_path / "work").glob("kill*")):
        assert digest_differences(ref, final_digest(ws)) == []


def test_digest_ignores_only_wall_clock_times(tmp_path: Path) -> None:
    """What the comparison excludes: ``created_at`` of a version's meta and DuckDB wall-clock
    columns. Anything else — a skill byte, a leftover temp file — is a difference."""
    from trm_assets.harness.loop.context import loop_context
    from trm_assets.harness.loop.runner import train
    from trm_assets_tests.tiny import tiny_config
    from trm_bench.overhead import new_workspace

    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=2)
    ref = final_digest(ws)
    other = tmp_path / "copy"
    shutil.copytree(ws, other)
    meta = other / "store" / "skills" / "v1" / "_meta.json"
    data = json.loads(meta.read_text(encoding="utf-8"))
    data["created_at"] = "1999-01-01T00:00:00Z"
    meta.write_text(json.dumps(data), encoding="utf-8")
    assert digest_differences(ref, final_digest(other)) == []
    skill = next((other / "store" / "skills" / "v1").glob("*.md"))
    skill.write_text(skill.read_text(encoding="utf-8") + " ", encoding="utf-8")
    (other / "tmp" / "gate-leftover").mkdir(parents=True)
    diffs = digest_differences(ref, final_digest(other))
    assert f"file:store/skills/v1/{skill.name}" in diffs and "listing" in diffs
    assert "+tmp/gate-leftover" in leftover_paths(ws, other)


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler catches it."""


def test_kill_between_two_holdout_evaluations_resumes_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trm_assets.harness.loop import slow_update
    from trm_assets.harness.loop.context import loop_context
    from trm_assets.harness.loop.runner import train
    from trm_assets_tests.tiny import tiny_config
    from trm_bench.overhead import new_workspace

    cfg = tiny_config()
    ref = new_workspace(tmp_path / "ref", cfg)
    with loop_context(ref, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx)
    ws = new_workspace(tmp_path / "ws", cfg)
    real = slow_update.holdout_accuracy
    calls: list[str] = []

    def first_then_die(ctx: Any, state: Any, scope: str, skills: str, prompts: str) -> Any:
        if calls:
            raise _Killed
        calls.append(f"{skills}/{prompts}")
        return real(ctx, state, scope, skills, prompts)

    with monkeypatch.context() as mp:  # undoes only this patch (not the repository cwd)
        mp.setattr(slow_update, "holdout_accuracy", first_then_die)
        with (
            pytest.raises(_Killed),
            loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx,
        ):
            train(ctx)
    assert calls  # killed inside function 9, after one held-out run was recorded
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx)
    assert digest_differences(final_digest(ref), final_digest(ws)) == []
