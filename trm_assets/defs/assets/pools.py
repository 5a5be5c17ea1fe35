"""The frozen test / validation / diagnosis pools of an experiment (SPEC 5.1).

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

import dagster as dg

from trm_assets.defs.recording import Scope, pools_metadata, sim_md
from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.dataset import load_dataset
from trm_assets.harness.storage.lock import workspace_lock
from trm_assets.harness.storage.pools import build_or_load_pools, pools_summary


def pools_asset(scope: Scope) -> dg.AssetsDefinition:
    exp = scope.experiment

    @dg.asset(
        key=scope.keys.pools,
        group_name=scope.name,
        kinds={"python"},
        description=f"The frozen pools of experiment {exp.name} ({exp.workspace}/pools.json).",
        pool=scope.pool,
    )
    def pools(context: dg.AssetExecutionContext) -> dg.MaterializeResult[None]:
        """Split the questions into pools once; later materializations reuse ``pools.json``."""
        cfg = exp.run_config()
        ds = load_dataset(cfg, with_trees=False)
        path = exp.workspace_dir() / "pools.json"
        if path.is_file():  # reading the frozen pools writes nothing
            p = build_or_load_pools(cfg, ds.questions, path)
        else:  # writing them is a write to the workspace: one writer (issue 18.1)
            try:
                with workspace_lock(  # create: as writing pools.json alone did
                    exp.workspace_dir(),
                    command="dagster run of pools",
                    run_id=context.run.run_id,
                    create=True,
                ):
                    p = build_or_load_pools(cfg, ds.questions, path)
            except TrmError as e:
                raise dg.Failure(description=str(e), allow_retries=False) from None
        summary = pools_summary(p, ds.questions)
        context.log.info(f"pools {summary['sizes']} fingerprint {p.fingerprint}")
        return dg.MaterializeResult(
            data_version=dg.DataVersion(p.fingerprint),
            metadata={
                **pools_metadata(summary, p.fingerprint),
                **sim_md(cfg.llm_provider == "sim"),
            },
        )

    return pools
