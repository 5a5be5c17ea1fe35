"""Asset checks of one experiment: the invariants a researcher must be able to trust without
reading code. Each check's logic is a function returning an ``AssetCheckResult``, run as a check
step by asset runs and logged as an evaluation by the op jobs (``slow_update``) that publish the
same assets, so no check stays "Not Evaluated" whichever path materialized its asset.
"""

import json
from collections.abc import Mapping
from typing import Any

import dagster as dg

from trm_assets.defs.recording import DATA_VERSION_TAG, Scope
from trm_assets.domain.pools import pools_from_dict
from trm_assets.harness.reports.audit import test_pool_leaks, unsafe_skill_paths
from trm_assets.harness.reports.lineage import (
    VersionRef,
    evaluated_versions,
    prompt_ref,
    skill_refs,
)


def leak_check_result(scope: Scope) -> dg.AssetCheckResult:
    """No test-pool question appears in any gate rollout, ladder entry or baseline-cache entry."""
    rep = test_pool_leaks(scope.experiment.workspace_dir())
    return dg.AssetCheckResult(
        passed=rep.ok,
        metadata={
            "test_pool": rep.test_pool,
            "gate_questions": rep.gate_rows,
            "ladder_entries": rep.ladder_entries,
            "cache_entries": rep.cache_entries,
            "leaks": str({k: v[:5] for k, v in rep.leaks.items() if v}),
        },
    )


def lineage_check_result(instance: dg.DagsterInstance, scope: Scope) -> dg.AssetCheckResult:
    """Every ``epoch_eval`` partition names exactly the versions its validation run evaluated:
    for each row, the content hash and the data version of the referenced ``skill_versions`` /
    ``prompt_versions`` event equal the store's hash of the version the run log recorded."""
    ws = scope.experiment.workspace_dir()
    types = scope.partitions.task_type_keys()
    mismatches: list[str] = []
    checked = 0
    epochs = sorted(instance.get_dynamic_partitions(scope.partitions.epochs_name))
    for key in epochs:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=scope.keys.epoch_eval, asset_partitions=[key]), limit=1
        ).records
        mat = records[0].asset_materialization if records else None
        if mat is None:
            continue
        md = mat.metadata
        try:
            skills, prompts = evaluated_versions(ws, str(md["val_run_id"].value))
        except LookupError as e:  # a reference the run log cannot back is a mismatch, not a crash
            mismatches.append(f"{key}: {e}")
            continue
        truth = {str(r.partition): r for r in skill_refs(ws, skills, types)}
        truth["(prompts)"] = prompt_ref(ws, prompts)
        table = md["per_task_type"]
        assert isinstance(table, dg.TableMetadataValue)
        rows = {str(r.data["task_type"]): r.data for r in table.value.records}
        for name, ref in truth.items():
            checked += 1
            row = rows.get(name)
            problem = (
                f"no row for {name}" if row is None else _row_problem(instance, scope, ref, row)
            )
            if problem:
                mismatches.append(f"{key} {name}: {problem}")
    return dg.AssetCheckResult(
        passed=checked > 0 and not mismatches,
        metadata={
            "epochs": len(epochs),
            "references_checked": checked,
            "mismatches": len(mismatches),
            "first_mismatches": "\n".join(mismatches[:10]) or "none",
        },
    )


def _row_problem(
    instance: dg.DagsterInstance, scope: Scope, ref: VersionRef, row: Mapping[str, Any]
) -> str:
    if row["version"] != ref.evaluated:
        return f"row names {row['version']}, the run log says {ref.evaluated}"
    if row["content_hash"] != ref.data_version:
        return f"content_hash {row['content_hash']} != store hash {ref.data_version}"
    key = scope.keys.skill_versions if ref.store == "skills" else scope.keys.prompt_versions
    sid = int(row["referenced_event"])
    found = (
        instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=key,
                asset_partitions=[ref.partition] if ref.partition is not None else None,
                storage_ids=[sid],
            ),
            limit=1,
        ).records
        if sid >= 0
        else []
    )
    if not found or found[0].asset_materialization is None:
        return f"referenced event {sid} is not a {key.to_user_string()} materialization here"
    event = found[0].asset_materialization
    dv = (event.tags or {}).get(DATA_VERSION_TAG)
    if dv != ref.data_version or row["referenced_data_version"] != dv:
        return f"referenced data version {dv} != store hash {ref.data_version}"
    if str(event.metadata["version"].value) != ref.introduced_in:
        return (
            f"referenced event records {event.metadata['version'].value}, not {ref.introduced_in}"
        )
    return ""


def skill_paths_result(scope: Scope) -> dg.AssetCheckResult:
    """Every skill file of the current version resolves inside the skills directory."""
    bad = unsafe_skill_paths(scope.experiment.workspace_dir())
    return dg.AssetCheckResult(passed=not bad, metadata={"unsafe": str(bad)})


def pools_result(scope: Scope) -> dg.AssetCheckResult:
    """The three pools never share a question (no leak from the test pool)."""
    path = scope.experiment.workspace_dir() / "pools.json"
    p = pools_from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))  # refuses overlap
    return dg.AssetCheckResult(
        passed=True,
        metadata={
            "fingerprint": p.fingerprint,
            "questions": len(p.test) + len(p.validation) + len(p.diagnosis),
        },
    )


def experiment_checks(scope: Scope) -> list[dg.AssetChecksDefinition]:
    keys = scope.keys

    @dg.asset_check(asset=keys.epoch_eval, name="no_test_pool_leak", blocking=False)
    def no_test_pool_leak() -> dg.AssetCheckResult:
        """No test-pool question appears in any gate rollout, ladder or baseline-cache entry."""
        return leak_check_result(scope)

    @dg.asset_check(asset=keys.epoch_eval, name="epoch_eval_lineage_exact", blocking=False)
    def epoch_eval_lineage_exact(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        """Each epoch_eval row references the skill_versions event of exactly the evaluated
        version (hashes compared with the store; any mismatch fails)."""
        return lineage_check_result(context.instance, scope)

    @dg.asset_check(asset=keys.skill_versions, name="skill_paths_inside_skills_dir")
    def skill_paths_inside_skills_dir() -> dg.AssetCheckResult:
        """Every skill file of the current version resolves inside the skills directory."""
        return skill_paths_result(scope)

    @dg.asset_check(asset=keys.pools, name="pools_disjoint", blocking=True)
    def pools_disjoint() -> dg.AssetCheckResult:
        """The three pools never share a question (no leak from the test pool)."""
        return pools_result(scope)

    return [
        no_test_pool_leak,
        epoch_eval_lineage_exact,
        skill_paths_inside_skills_dir,
        pools_disjoint,
    ]
