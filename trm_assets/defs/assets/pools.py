"""The frozen test / validation / diagnosis pools (SPEC 5.1).

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

import json

import dagster as dg

from trm_assets.defs.resources import TrmResource
from trm_assets.domain.pools import pools_from_dict
from trm_assets.harness.data.dataset import load_dataset
from trm_assets.harness.storage.pools import build_or_load_pools, pools_summary


@dg.asset(group_name="data", kinds={"python"})
def pools(context: dg.AssetExecutionContext, trm: TrmResource) -> dg.MaterializeResult[None]:
    """Split the questions into pools once; later materializations reuse ``pools.json``."""
    cfg = trm.run_config()
    ds = load_dataset(cfg, with_trees=False)
    p = build_or_load_pools(cfg, ds.questions, trm.workspace_dir() / "pools.json")
    summary = pools_summary(p, ds.questions)
    rows = [dg.TableRecord({"task_type": t, **c}) for t, c in summary["by_task_type"].items()]
    context.log.info(f"pools {summary['sizes']} fingerprint {p.fingerprint}")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(p.fingerprint),
        metadata={
            "simulated": cfg.llm_provider == "sim",
            "fingerprint": p.fingerprint,
            "test": len(p.test),
            "validation": len(p.validation),
            "diagnosis": len(p.diagnosis),
            "by_task_type": dg.MetadataValue.table(
                rows,
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn("task_type", "string"),
                        dg.TableColumn("test", "int"),
                        dg.TableColumn("validation", "int"),
                        dg.TableColumn("diagnosis", "int"),
                    ]
                ),
            ),
        },
    )


@dg.asset_check(asset=pools, blocking=True)
def pools_disjoint(trm: TrmResource) -> dg.AssetCheckResult:
    """The three pools never share a question (no leak from the test pool)."""
    path = trm.workspace_dir() / "pools.json"
    p = pools_from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))  # refuses overlap
    return dg.AssetCheckResult(
        passed=True,
        metadata={
            "fingerprint": p.fingerprint,
            "questions": len(p.test) + len(p.validation) + len(p.diagnosis),
        },
    )
