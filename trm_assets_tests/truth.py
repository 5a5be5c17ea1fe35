"""What a training's reports must say, recomputed from the run log and the version store alone
(not through the code that writes the reports): which validation run an epoch kept, its accuracy,
and the best-of-validation version."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb


def _prompt_reasons(ws: Path) -> list[str]:
    store = ws / "store" / "prompts"
    return [
        str(json.loads((d / "_meta.json").read_text(encoding="utf-8")).get("reason", ""))
        for d in store.iterdir()
        if d.name.startswith("v") and (d / "_meta.json").exists()
    ]


def _prompts_versions(ws: Path) -> dict[str, str]:
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT run_id, prompts_version FROM runs").fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def run_versions(ws: Path, run_id: str) -> tuple[str, str]:
    """(skills version, prompts version) a run recorded."""
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        row = con.execute(
            "SELECT skills_version, prompts_version FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
    assert row is not None, run_id
    return str(row[0]), str(row[1])


def evaluated_run(ws: Path, epoch: int, base: str = "train") -> str:
    """The validation run an epoch's report must name (SPEC 5.6 step 8): R2 when it ran and was
    kept; R when R2 did not run, or when it read other prompts than R and scored lower (the
    prompts are then reverted). Decided from the runs' versions and predictions; the store must
    hold a revert version exactly when R2 was reverted."""
    prompts = _prompts_versions(ws)
    r, r2 = f"{base}_e{epoch}_R", f"{base}_e{epoch}_R2"
    assert r in prompts, r
    reverted = False
    if r2 in prompts:
        acc_r, acc_r2 = run_accuracy(ws, r)[0], run_accuracy(ws, r2)[0]
        reverted = (
            prompts[r2] != prompts[r]
            and acc_r is not None
            and acc_r2 is not None
            and acc_r2 < acc_r
        )
    recorded = any(x.startswith(f"R2 regressed e{epoch} ") for x in _prompt_reasons(ws))
    assert recorded == reverted, (epoch, recorded, reverted)
    return r2 if r2 in prompts and not reverted else r


def run_accuracy(ws: Path, run_id: str) -> tuple[float | None, dict[str, tuple[float, int]]]:
    """(accuracy, task type → (accuracy, n)) of a run, infra failures left out (None: no
    scored rollout)."""
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT task_type, avg(CAST(correct AS INTEGER)), count(*) FROM predictions "
            "WHERE run_id = ? AND correct IS NOT NULL GROUP BY task_type",
            [run_id],
        ).fetchall()
        (acc,) = con.execute(
            "SELECT avg(CAST(correct AS INTEGER)) FROM predictions "
            "WHERE run_id = ? AND correct IS NOT NULL",
            [run_id],
        ).fetchone() or (None,)
    per_type = {str(t): (float(a), int(n)) for t, a, n in rows}
    return (None if acc is None else float(acc)), per_type


def best_run(ws: Path, epochs: int, base: str = "train") -> str:
    """Best = the first of the seed evaluation and the epochs' kept validation runs, in order,
    with the highest accuracy: a later run replaces it only when strictly better, and a run
    without an accuracy never does (a best without one is replaced by any that has one)."""
    runs = [f"{base}_init"]
    for e in range(epochs):
        runs.append(f"{base}_e{e}_R")
        kept = evaluated_run(ws, e, base)
        if kept != runs[-1]:
            runs.append(kept)
    best, best_acc = runs[0], run_accuracy(ws, runs[0])[0]
    for r in runs[1:]:
        acc = run_accuracy(ws, r)[0]
        if acc is not None and (best_acc is None or acc > best_acc):
            best, best_acc = r, acc
    return best
