"""``trm check WORKSPACE``: verify everything a workspace holds, list every problem (issue 18.5).

Read-only. Each check reads a file the way the loop does and reports what the loop would refuse,
without stopping at the first problem:

* the manifest (and that the workspace is a directory);
* the store: every version of both stores matches its ``_meta.json`` (no edited, added or missing
  file), names its parent, and nothing else lives in a store root;
* the pointers: every version the manifest and the checkpoint refer to exists and is intact;
* ``state.json``: a complete checkpoint of this code's format;
* the run log: present once runs were recorded, readable, of this workspace (identity), and
  holding every run the checkpoint refers to; every accuracy the checkpoint and the manifest
  quote, and every gate's candidate outcomes, equal the rows on record;
* ``pools.json``, ``ladder.json`` (its fingerprint, and that it covers the validation pool) and
  every ``baseline_cache/*.json``.

Notes (not problems) say what is expected after an interruption: a version newer than the
checkpoint's mark (rolled back by the next unit), a temp directory of a killed write, a workspace
in use by another process.

Why it is long: it is the one read-only check of the whole workspace, one short function per
file it reads, and every check must run even after another failed; split across modules, the
report's order and its "ok" would be assembled in several places.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm_assets.domain.errors import TrmError
from trm_assets.domain.ladder import LadderParams, ladder_from_dict, ladder_pool_fingerprint
from trm_assets.domain.pools import Pools, pools_from_dict
from trm_assets.harness.storage.cache_store import read_cache_file
from trm_assets.harness.storage.checkpoint import (
    TrainState,
    read_state_file,
    referenced_versions,
)
from trm_assets.harness.storage.lock import LOCK_FILE, lock_holder
from trm_assets.harness.storage.runlog import RunLogBusyError, RunLogReader
from trm_assets.harness.storage.versions import (
    META_FILE,
    StoreError,
    list_versions,
    parse_version,
    verify_version,
)
from trm_assets.harness.storage.workspace import (
    RUN_DB_FILE,
    Manifest,
    is_eval_command_kind,
    lost_state_message,
    read_manifest,
    runs_past_init,
    store_roots,
)


@dataclass
class CheckReport:
    """What ``trm check`` found: ``problems`` (the workspace is not usable as is) and ``notes``."""

    workspace: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)  # what was verified, counted

    @property
    def ok(self) -> bool:
        return not self.problems


def check_workspace(workspace: str | Path) -> CheckReport:
    """Verify the whole workspace; never raises for a problem of the workspace."""
    ws = Path(workspace)
    report = CheckReport(ws)
    try:
        manifest = read_manifest(ws)
    except TrmError as e:
        report.problems.append(str(e))
        return report
    holder = lock_holder(ws)
    if holder is not None:
        report.notes.append(
            f"{ws / LOCK_FILE}: the workspace is in use by {holder.describe()}; what it is "
            "writing now may show up as a problem — check again when it is done"
        )
    _check_store(ws, report)
    state = _guard(report, lambda: _load_state(ws))
    if not (ws / "state.json").exists() and (lost := runs_past_init(manifest)):
        report.problems.append(lost_state_message(ws / "state.json", lost))
    _check_pointers(ws, state, report)
    if state is not None:
        _check_mark(ws, state, report)
    _check_run_log(ws, manifest, state, report)
    pools = _guard(report, lambda: _load_pools(ws))
    _guard(report, lambda: _check_ladder(ws, pools, report, state))
    _check_cache(ws, report)
    return report


def _guard(report: CheckReport, fn: Callable[[], Any]) -> Any:
    """Run one check; a human error becomes a problem line, the check's result None."""
    try:
        return fn()
    except TrmError as e:
        report.problems.append(str(e))
    except (OSError, ValueError) as e:
        report.problems.append(f"{type(e).__name__}: {e}")
    return None


# ------------------------------------------------------------------------------------------------
# store and pointers


def _check_store(ws: Path, report: CheckReport) -> None:
    for root in store_roots(ws):
        kind = root.name
        if not root.is_dir():
            report.problems.append(f"{root}: missing (every workspace has a {kind} store)")
            continue
        versions = list_versions(root)
        known = set(versions)
        for entry in sorted(root.iterdir()):
            if entry.name in known:
                continue
            if entry.name.startswith(".tmp-"):
                report.notes.append(
                    f"{entry}: temp directory of an interrupted version write (removed by the "
                    "next write)"
                )
            else:
                report.problems.append(
                    f"{entry}: not a version of the {kind} store (expected only v1, v2, … "
                    "directories); move it out of the store"
                )
        for v in versions:
            try:
                meta = verify_version(root, v)
            except StoreError as e:
                report.problems.append(str(e))
                continue
            if meta.parent is not None and (
                meta.parent not in known or parse_version(meta.parent) >= parse_version(v)
            ):
                report.problems.append(
                    f"{root / v / META_FILE}: parent {meta.parent} is not an earlier version "
                    f"of this store (known: {', '.join(versions)})"
                )
        report.checked[f"{kind} versions"] = len(versions)


def _check_pointers(ws: Path, state: TrainState | None, report: CheckReport) -> None:
    skills_root, prompts_root = store_roots(ws)
    refs = referenced_versions(ws, state)
    for who, kind, version in refs:
        root = skills_root if kind == "skills" else prompts_root
        try:
            verify_version(root, version)
        except StoreError as e:
            if (root / version).is_dir():
                continue  # an integrity problem of the version itself, reported by the store
            report.problems.append(f"{who} refers to {kind} version {version}: {e}")
    report.checked["references"] = len(refs)


# ------------------------------------------------------------------------------------------------
# checkpoint


def _load_state(ws: Path) -> TrainState | None:
    path = ws / "state.json"
    return read_state_file(path) if path.exists() else None


def _check_mark(ws: Path, state: TrainState, report: CheckReport) -> None:
    mark = state.workspace_mark
    for root, key in zip(store_roots(ws), ("skills_latest", "prompts_latest"), strict=True):
        if key not in mark:
            continue
        newer = [v for v in list_versions(root) if parse_version(v) > int(mark[key])]
        if newer:
            report.notes.append(
                f"{root}: {', '.join(newer)} written after the last checkpoint by an "
                "interrupted unit of work (the next unit rolls them back)"
            )


# ------------------------------------------------------------------------------------------------
# run log


def _state_run_ids(state: TrainState | None) -> set[str]:
    if state is None:
        return set()
    ids = {state.eval_prev_run_id} if state.eval_prev_run_id else set()
    if state.seed_eval and state.seed_eval.run_id:
        ids.add(state.seed_eval.run_id)
    ids |= {p.anchor_run_id for p in state.probations.values() if p.anchor_run_id}
    return ids


def _check_run_log(
    ws: Path, manifest: Manifest, state: TrainState | None, report: CheckReport
) -> None:
    path = ws / RUN_DB_FILE
    if not path.exists():
        if manifest.history or state is not None:
            report.problems.append(
                f"{path}: missing, but manifest.json records {len(manifest.history)} run(s); "
                "restore it from a backup, or start a new workspace (`trm init`)"
            )
        return
    try:
        reader = RunLogReader.open(path)
    except RunLogBusyError as e:
        report.notes.append(f"run log not checked: {e}")
        return
    except TrmError as e:
        report.problems.append(str(e))
        return
    with reader:
        try:
            stored = reader.workspace_id()
            if manifest.workspace_id is None:
                report.notes.append(
                    f"{ws / 'manifest.json'}: no workspace identity (created before identities "
                    "existed): a run log copied from another workspace cannot be detected"
                )
            elif stored is None:
                report.notes.append(
                    f"{path}: no workspace identity yet (the next unit of work records it)"
                )
            elif stored != manifest.workspace_id:
                report.problems.append(
                    f"{path}: belongs to workspace {stored}, not to this one "
                    f"({manifest.workspace_id} in manifest.json) — copied from another workspace? "
                    "Put this workspace's own runs.duckdb back"
                )
            rows = reader.query(
                "SELECT r.run_id, r.status, r.n_rollouts, r.skills_version, r.prompts_version, "
                "r.accuracy, "
                "(SELECT count(*) FROM predictions p WHERE p.run_id = r.run_id) AS n_pred "
                "FROM runs r"
            )
            runs = {str(r["run_id"]) for r in rows}
            n_pred = reader.query("SELECT count(*) AS n FROM predictions")[0]["n"]
            evidence = _evidence_off_record(reader)
        except TrmError as e:
            report.problems.append(str(e))
            return
        except Exception as e:  # a damaged table: any DuckDB error
            report.problems.append(f"{path}: cannot be read ({type(e).__name__}: {e})")
            return
    for run_id in sorted(_state_run_ids(state) - runs):
        report.problems.append(
            f"{path}: run {run_id!r}, which state.json refers to, is not in table runs (the run "
            "log is older than the checkpoint, or from elsewhere)"
        )
    if manifest.workspace_id is None or stored in (None, manifest.workspace_id):  # not foreign
        mark = state.workspace_mark if state is not None else {}
        by_id = {str(r["run_id"]): r for r in rows}
        _check_runs_agree(path, manifest, mark, by_id, report)
        _check_quoted_accuracies(path, manifest, state, by_id, report)
        for gate, n in evidence:
            report.problems.append(
                f"{path}: gate {gate!r}: {n} candidate outcome(s) of its evidence differ from "
                f"the rows of run {gate + '_cand'!r} (the rows on record are not what the gate "
                "decided on: a unit re-run after a kill kept its killed attempt's rows)"
            )
    report.checked["runs"] = len(runs)
    report.checked["predictions"] = int(n_pred)


def _check_runs_agree(
    path: Path,
    manifest: Manifest,
    mark: Mapping[str, Any],
    runs: dict[str, dict[str, Any]],
    report: CheckReport,
) -> None:
    """The run log and the manifest tell one story: a finished run holds the rollouts it counted
    (``finish_run`` counts them from ``predictions``), and every run the manifest names (its
    history, the best's evidence) is in the run log with the versions the manifest says.

    A run is named in the manifest before its row reaches the run log (the row is written
    behind), so a run recorded after the checkpoint (past the mark's history, a best the mark
    does not hold) that is missing is a note: a killed command left it, and the next unit rolls
    it back (a killed `trm eval` runs again)."""
    for run_id, r in sorted(runs.items()):
        if r["status"] == "done" and int(r["n_rollouts"] or 0) != int(r["n_pred"]):
            report.problems.append(
                f"{path}: run {run_id!r} counted {r['n_rollouts']} rollout(s) but table "
                f"predictions holds {r['n_pred']} (rows deleted or added after it finished)"
            )
    covered = int(mark.get("history_len", 0))
    named = [  # a `trm eval` killed before its row landed is kept by rollbacks: never covered
        (
            h.run_id,
            h.skills_version,
            h.prompts_version,
            "its history",
            i < covered and not is_eval_command_kind(h.kind),
        )
        for i, h in enumerate(manifest.history)
    ]
    best = manifest.best
    if best is not None and best.run_id is not None:
        marked = (mark.get("best") or {}).get("run_id") == best.run_id
        named.append((best.run_id, best.skills, best.prompts, "the best's evidence", marked))
    for run_id, skills, prompts, role, checkpointed in named:
        row = runs.get(run_id)
        if row is None:
            where = (
                f"{path}: run {run_id!r}, which manifest.json names ({role}), is not in table runs"
            )
            if checkpointed:
                report.problems.append(where)
            else:
                report.notes.append(
                    f"{where}: recorded after the checkpoint by a command that was stopped "
                    "(resume, or run that `trm eval` again)"
                )
            continue
        said, logged = (skills, prompts), (row["skills_version"], row["prompts_version"])
        if None not in said and said != logged:
            report.problems.append(
                f"{path}: run {run_id!r} evaluated {logged[0]}/{logged[1]} by table runs, but "
                f"manifest.json ({role}) says {said[0]}/{said[1]}"
            )


def _evidence_off_record(reader: RunLogReader) -> list[tuple[str, int]]:
    """Gates whose evidence names a candidate outcome (not imputed) that the candidate run's row
    of that question and replicate does not hold: gate → how many."""
    if not reader.has_table("gate_evidence"):
        return []
    rows = reader.query(
        "SELECT e.gate_run_id AS gate, count(*) AS n FROM gate_evidence e JOIN predictions p "
        "ON p.run_id = e.gate_run_id || '_cand' AND p.question_id = e.question_id "
        "AND p.replicate = e.replicate "
        "WHERE e.row_kind = 'question' AND e.candidate IS NOT NULL "
        "AND NOT coalesce(e.candidate_imputed, false) AND p.correct IS NOT NULL "
        "AND p.correct <> e.candidate GROUP BY e.gate_run_id ORDER BY e.gate_run_id"
    )
    return [(str(r["gate"]), int(r["n"])) for r in rows]


def _check_quoted_accuracies(
    path: Path,
    manifest: Manifest,
    state: TrainState | None,
    runs: Mapping[str, Mapping[str, Any]],
    report: CheckReport,
) -> None:
    """Every validation accuracy the checkpoint or the manifest quotes for a run (the seed
    evaluation, the latest evaluation, R and R2, each epoch's, the best's) is the accuracy of
    that run's rows on record (``finish_run`` computes it from them), for runs that finished."""
    quoted: list[tuple[str, str, float | None]] = []
    best = manifest.best
    if best is not None and best.run_id is not None:
        quoted.append(("manifest.json (the best)", best.run_id, best.val_accuracy))
    if state is not None:
        if state.seed_eval is not None:
            quoted.append(("state.json (seed_eval)", state.seed_eval.run_id,
                           state.seed_eval.val_accuracy))  # fmt: skip
        if state.eval_prev_run_id:
            quoted.append(("state.json (eval_prev)", state.eval_prev_run_id, state.eval_prev_acc))
        for ref in (state.slow.r, state.slow.r2.r2 if state.slow.r2 else None):
            if ref is not None:
                quoted.append(("state.json (slow)", ref.run_id, ref.accuracy))
        for h in state.history:
            if h.val_run_id:
                quoted.append((f"state.json (epoch {h.epoch})", h.val_run_id, h.val_accuracy))
    off: dict[tuple[str, float], list[str]] = {}  # (run, quoted accuracy) → who quotes it
    for who, run_id, acc in quoted:
        row = runs.get(run_id)
        if acc is None or row is None or row["status"] != "done" or row["accuracy"] is None:
            continue
        if abs(float(row["accuracy"]) - float(acc)) > 1e-9:
            off.setdefault((run_id, float(acc)), []).append(who)
    for (run_id, acc), quoters in off.items():
        logged = float(runs[run_id]["accuracy"])
        report.problems.append(
            f"{path}: {', '.join(quoters)} quote(s) accuracy {acc:.4f} for run {run_id!r}, but its "
            f"rows on record give {logged:.4f} (the rows are not the outcomes the loop decided "
            "on: a unit re-run after a kill kept its killed attempt's rows)"
        )


# ------------------------------------------------------------------------------------------------
# pools, ladder, cache


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise StoreError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
    except UnicodeDecodeError:
        raise StoreError(f"{path}: not UTF-8 text") from None


def _load_pools(ws: Path) -> Pools | None:
    path = ws / "pools.json"
    if not path.exists():
        return None
    data = _read_json(path)
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object")
    return pools_from_dict(data, str(path))


def _check_ladder(
    ws: Path, pools: Pools | None, report: CheckReport, state: TrainState | None
) -> None:
    path = ws / "ladder.json"
    if not path.exists():
        if state is not None and state.initialized:  # the init unit wrote it
            report.problems.append(
                f"{path}: missing after the init unit wrote it (a resume would refuse: the "
                "ladder cannot be rebuilt identically; restore it from a backup)"
            )
        return
    data = _read_json(path)
    if not isinstance(data, dict):
        raise StoreError(f"{path}: expected a JSON object")
    try:
        tasks = {str(e[0]): str(e[1]) for e in data["entries"]}
        params = LadderParams(**data["params"])
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise StoreError(f"{path}: not a ladder ({type(e).__name__}: {e})") from None
    ladder = ladder_from_dict(
        data, expected_pool_fingerprint=ladder_pool_fingerprint(tasks, params), source=str(path)
    )
    if pools is not None and set(tasks) != set(pools.validation):
        report.problems.append(
            f"{path}: covers {len(tasks)} questions, not the {len(pools.validation)} of the "
            "validation pool in pools.json"
        )
    report.checked["ladder entries"] = len(ladder.entries)


def _check_cache(ws: Path, report: CheckReport) -> None:
    directory = ws / "baseline_cache"
    if not directory.is_dir():
        return
    n = 0
    for path in sorted(directory.glob("*.json")):
        try:
            n += len(read_cache_file(path))
        except TrmError as e:
            report.problems.append(str(e))
    report.checked["cache entries"] = n
