"""Training assets: skill versions and baseline caches per task type, batches and epoch results
per epoch, step results per (epoch, step). Every body is a call into the harness.

Lineage: ``skill_versions[task]`` carries the skill file's content hash as its ``DataVersion``;
``epoch_eval[e]`` copies, per task type, the hash of the skill that produced its accuracy and the
data version of the matching ``skill_versions`` partition materialization (looked up by partition:
the input event pointer Dagster records may point at another partition).
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from trm_assets.defs.assets.pools import pools
from trm_assets.defs.partitions import (
    epoch_step_of,
    epoch_steps,
    epochs,
    parse_key,
    task_types,
)
from trm_assets.defs.resources import TrmResource
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.units import run_epoch, run_unit
from trm_assets.harness.reports.lineage import (
    epoch_eval_facts,
    load_state_dict,
    skill_facts,
    step_rows,
)
from trm_assets.harness.storage.cache_store import BaselineCacheStore

SIMULATED_NOTE = "SIMULATED world: synthetic data and a simulated model (see data/README.md)"


def _sim_md(simulated: bool) -> dict[str, Any]:
    return {"simulated": simulated, **({"note": SIMULATED_NOTE} if simulated else {})}


# ------------------------------------------------------------------------------------------------
# per task type


def skill_versions_materialization_md(
    trm: TrmResource, task_type: str
) -> tuple[str, dict[str, Any]]:
    """(content hash, metadata) of the current skill file of ``task_type``."""
    f = skill_facts(trm.workspace_dir(), task_type)
    md = {
        "skill_file": f.skill_file,
        "skills_version": f.skills_version,
        "content_hash": f.content_hash,
        "head": dg.MetadataValue.md(f"```markdown\n{f.head}\n```"),
    }
    return f.content_hash, md


@dg.asset(partitions_def=task_types, group_name="skills", deps=[pools])
def skill_versions(
    context: dg.AssetExecutionContext, trm: TrmResource
) -> dg.MaterializeResult[None]:
    """The current skill file of a task type; its DataVersion is the file's content hash."""
    digest, md = skill_versions_materialization_md(trm, context.partition_key)
    return dg.MaterializeResult(data_version=dg.DataVersion(digest[:16]), metadata=md)


@dg.asset(partitions_def=task_types, group_name="skills", deps=[skill_versions])
def baseline_cache(
    context: dg.AssetExecutionContext, trm: TrmResource
) -> dg.MaterializeResult[None]:
    """Gate baseline rollouts cached for a task type (GATE §6.3: gate draws only)."""
    store = BaselineCacheStore(trm.workspace_dir() / "baseline_cache", context.partition_key)
    keys = list(store.entries)
    return dg.MaterializeResult(
        metadata={
            "entries": len(keys),
            "skill_hashes": len({k.skill_hash for k in keys}),
            "questions": len({k.qid for k in keys}),
            "path": str(store.path),
        }
    )


# ------------------------------------------------------------------------------------------------
# per epoch / step


@dg.asset(partitions_def=epochs, group_name="training", deps=[pools])
def batches(context: dg.AssetExecutionContext, trm: TrmResource) -> dg.MaterializeResult[None]:
    """The mini-batches of an epoch (drawn when its first step starts)."""
    epoch = parse_key(context.partition_key, "e")
    state = load_state_dict(trm.workspace_dir())
    if state is None or state.get("epoch_started", -1) != epoch:
        raise dg.Failure(
            f"epoch e{epoch} has not started (or is over): its batches are drawn by its first "
            "step; materialize step_results for e{epoch}|s0 or the epoch_eval partition"
        )
    sizes = [len(b) for b in state["batches"]]
    return dg.MaterializeResult(
        metadata={
            "epoch": epoch,
            "batches": len(sizes),
            "questions": sum(sizes),
            "sizes": str(sizes),
        }
    )


@dg.asset(partitions_def=epoch_steps, group_name="training", deps=[pools])
def step_results(context: dg.AssetExecutionContext, trm: TrmResource) -> dg.MaterializeResult[None]:
    """One step of one epoch: roll out the batch, diagnose, gate each skill edit (SPEC 5.3)."""
    epoch, step = epoch_step_of(context.partition_key)
    with trm.open() as ctx:
        ran = run_unit(ctx, Action("step", epoch=epoch, step=step), echo=context.log.info)
        simulated = ctx.providers.simulated
    return dg.MaterializeResult(metadata=step_metadata(trm, epoch, step, ran, simulated))


def step_metadata(
    trm: TrmResource, epoch: int, step: int, ran: bool, simulated: bool
) -> dict[str, Any]:
    rows = step_rows(trm.workspace_dir(), epoch, step)
    counts = {a: sum(1 for r in rows if r["action"] == a) for a in ("accept", "reject", "abort")}
    table = dg.MetadataValue.md(
        "| skill | action | verdict | wins | losses |\n|---|---|---|---|---|\n"
        + "\n".join(
            f"| {r['skill_file']} | {r['action']} | {r['verdict'] or ''} | {r['wins'] or ''} "
            f"| {r['losses'] or ''} |"
            for r in rows
        )
    )
    return {
        "epoch": epoch,
        "step": step,
        "ran_now": ran,
        "accepted": counts["accept"],
        "rejected": counts["reject"],
        "aborted": counts["abort"],
        "skills": table,
        **_sim_md(simulated),
    }


@dg.multi_asset(
    partitions_def=epochs,
    group_name="training",
    specs=[
        dg.AssetSpec(
            "epoch_eval",
            deps=[
                dg.AssetDep(skill_versions, partition_mapping=dg.AllPartitionMapping()),
                dg.AssetDep(batches),
            ],
            description="Validation accuracy of an epoch and the skill versions that produced it.",
        ),
        dg.AssetSpec(
            "holdout_report",
            deps=["epoch_eval"],
            description="Four-way held-out report on the test pool (seed, start, current, best).",
        ),
    ],
    can_subset=False,
)
def epoch_results(
    context: dg.AssetExecutionContext, trm: TrmResource
) -> Iterator[dg.MaterializeResult[None]]:
    """Materializing an epoch partition runs what is left of that epoch (steps, then the ten
    slow-update functions) — the same harness units the sensor launches — and publishes results."""
    epoch = parse_key(context.partition_key, "e")
    with trm.open() as ctx:
        run_epoch(ctx, epoch, echo=context.log.info)
        simulated = ctx.providers.simulated
    for event in skill_version_events(trm, context.instance):
        context.log_event(event)
    yield from epoch_outputs(trm, context.instance, epoch, simulated)


def skill_version_events(
    trm: TrmResource, instance: dg.DagsterInstance
) -> list[dg.AssetMaterialization]:
    """Record the current skill of each task type whose content changed since its last
    ``skill_versions`` materialization, so lineage always has the hash an accuracy came from."""
    events = []
    for task in task_types.get_partition_keys():
        digest, md = skill_versions_materialization_md(trm, task)
        last = _latest_materialization(instance, "skill_versions", task)
        if last is not None and last.get("content_hash") == digest:
            continue
        events.append(
            dg.AssetMaterialization(
                asset_key="skill_versions",
                partition=task,
                metadata=md,
                tags={
                    "dagster/data_version": digest[:16],
                    "dagster/data_version_is_user_provided": "true",
                },
            )
        )
    return events


def _latest_materialization(
    instance: dg.DagsterInstance, asset: str, partition: str
) -> dict[str, object] | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    if not records:
        return None
    mat = records[0].asset_materialization
    if mat is None:
        return None
    out: dict[str, object] = {k: v.value for k, v in mat.metadata.items()}
    out["data_version"] = (mat.tags or {}).get("dagster/data_version")
    out["run_id"] = records[0].run_id
    return out


def epoch_outputs(
    trm: TrmResource, instance: dg.DagsterInstance, epoch: int, simulated: bool
) -> Iterator[dg.MaterializeResult[None]]:
    """The two MaterializeResults of an epoch (the asset path)."""
    for key, md in epoch_metadata(trm, instance, epoch, simulated):
        yield dg.MaterializeResult(asset_key=key, metadata=md)


def epoch_metadata(
    trm: TrmResource, instance: dg.DagsterInstance, epoch: int, simulated: bool
) -> list[tuple[str, dict[str, Any]]]:
    """(asset key, metadata) of ``epoch_eval`` and ``holdout_report`` for one epoch, shared by
    the epoch asset and the last op of the ``slow_update`` job."""
    types = list(task_types.get_partition_keys())
    facts = epoch_eval_facts(trm.workspace_dir(), epoch, types)
    s = facts["summary"]
    lineage_rows = []
    hashes: dict[str, Any] = {}
    for t in types:
        sk = facts["skills"][t]
        mat = _latest_materialization(instance, "skill_versions", t)
        upstream = mat.get("data_version") if mat else None
        hashes[f"skill_hash/{sk.skill_file}"] = sk.content_hash
        acc = facts["per_task"].get(t, {}).get("accuracy")
        lineage_rows.append(
            dg.TableRecord(
                {
                    "task_type": t,
                    "accuracy": acc if acc is not None else float("nan"),
                    "n": int(facts["per_task"].get(t, {}).get("n") or 0),
                    "skill_file": sk.skill_file,
                    "content_hash": sk.content_hash[:16],
                    "skill_versions_data_version": str(upstream or ""),
                }
            )
        )
    per_task = dg.MetadataValue.table(
        lineage_rows,
        schema=dg.TableSchema(
            columns=[
                dg.TableColumn("task_type", "string"),
                dg.TableColumn("accuracy", "float"),
                dg.TableColumn("n", "int"),
                dg.TableColumn("skill_file", "string"),
                dg.TableColumn("content_hash", "string"),
                dg.TableColumn("skill_versions_data_version", "string"),
            ]
        ),
    )
    eval_md: dict[str, Any] = {
        "val_accuracy": dg.MetadataValue.float(float(s["val_accuracy"] or 0.0)),
        "val_run_id": s["val_run_id"],
        "skills_version": facts["skills_version"],
        "prompts_version": facts["prompts_version"],
        "per_task_type": per_task,
        "rollouts": int(s["rollouts"]),
        "tokens": int(s["tokens"]),
        "accepted": int(s["accepted"]),
        "rejected": int(s["rejected"]),
        "rolled_back": int(s["rolled_back"]),
        "gates": int(s["gates"]),
        "best_skills_version": s["best"]["skills_version"],
        **hashes,
        **_sim_md(simulated),
    }
    if s.get("val_expected_accuracy") is not None:
        eval_md["val_expected_accuracy"] = dg.MetadataValue.float(float(s["val_expected_accuracy"]))
    hold_md: dict[str, Any] = {**_sim_md(simulated)}
    for label, h in s["holdout"].items():
        if h["accuracy"] is not None:
            hold_md[f"test_accuracy/{label}"] = dg.MetadataValue.float(float(h["accuracy"]))
        hold_md[f"versions/{label}"] = f"{h['skills']}/{h['prompts']}"
        if h.get("expected") is not None:
            hold_md[f"test_expected_accuracy/{label}"] = dg.MetadataValue.float(
                float(h["expected"])
            )
    return [("epoch_eval", eval_md), ("holdout_report", hold_md)]
