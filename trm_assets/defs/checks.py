"""Asset checks: the invariants a researcher must be able to trust without reading code."""

import dagster as dg

from trm_assets.defs.assets.training import skill_versions
from trm_assets.defs.resources import TrmResource
from trm_assets.harness.reports.audit import test_pool_leaks, unsafe_skill_paths

REQUIRED_EPOCH_METADATA = ("val_accuracy", "skills_version", "prompts_version", "per_task_type")


@dg.asset_check(asset="epoch_eval", blocking=False)
def no_test_pool_leak(trm: TrmResource) -> dg.AssetCheckResult:
    """No test-pool question appears in any gate rollout, ladder entry or baseline-cache entry."""
    rep = test_pool_leaks(trm.workspace_dir())
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


@dg.asset_check(asset="epoch_eval", blocking=False)
def epoch_eval_has_lineage(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """The latest ``epoch_eval`` materialization carries accuracy and version metadata."""
    records = context.instance.fetch_materializations(dg.AssetKey("epoch_eval"), limit=1).records
    if not records or records[0].asset_materialization is None:
        return dg.AssetCheckResult(passed=False, metadata={"reason": "no materialization yet"})
    md = records[0].asset_materialization.metadata
    missing = [k for k in REQUIRED_EPOCH_METADATA if k not in md]
    hashes = [k for k in md if k.startswith("skill_hash/")]
    return dg.AssetCheckResult(
        passed=not missing and bool(hashes),
        metadata={"missing": str(missing), "skill_hashes": len(hashes)},
    )


@dg.asset_check(asset=skill_versions, blocking=False)
def skill_paths_inside_skills_dir(trm: TrmResource) -> dg.AssetCheckResult:
    """Every skill file of the current version resolves inside the skills directory."""
    bad = unsafe_skill_paths(trm.workspace_dir())
    return dg.AssetCheckResult(passed=not bad, metadata={"unsafe": str(bad)})
