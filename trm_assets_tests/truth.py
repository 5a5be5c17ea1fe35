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


def _run_ids(ws: Path) -> list[str]:
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()]


def evaluated_run(ws: Path, epoch: int, base: str = "train") -> str:
    """The validation run an epoch's report must name (SPEC 5.6 step 8): R2 when it ran and was
    kept; R when R2 did not run, or regressed with changed prompts (the prompts were then
    reverted, by a version whose reason says so)."""
    ids = set(_run_ids(ws))
    r, r2 = f"{base}_e{epoch}_R", f"{base}_e{epoch}_R2"
    assert r in ids, r
    reverted = any(x.startswith(f"R2 regressed e{epoch} ") for x in _prompt_reasons(ws))
    return r2 if r2 in ids and not reverted else r


def run_accuracy(ws: Path, run_id: str) -> tuple[float, dict[str, tuple[float, int]]]:
    """(accuracy, task type → (accuracy, n)) of a run, infra failures left out."""
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
    assert acc is not None, run_id
    return float(acc), {str(t): (float(a), int(n)) for t, a, n in rows}


def best_run(ws: Path, epochs: int, base: str = "train") -> str:
    """Best = the first of the seed evaluation and the epochs' kept validation runs, in order,
    with the highest accuracy (a later run replaces it only when strictly better)."""
    runs = [f"{base}_init"]
    for e in range(epochs):
        runs.append(f"{base}_e{e}_R")
        kept = evaluated_run(ws, e, base)
        if kept != runs[-1]:
            runs.append(kept)
    best, best_acc = runs[0], run_accuracy(ws, runs[0])[0]
    for r in runs[1:]:
        acc = run_accuracy(ws, r)[0]
        if acc > best_acc:
            best, best_acc = r, acc
    return best
