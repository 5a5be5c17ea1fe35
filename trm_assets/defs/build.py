"""One experiment's Definitions: its assets (under ``<name>/``, in group ``<name>``), checks,
jobs and sensor. ``definitions.py`` merges these for every experiment of the instance; the driver
(``trm train``) builds the one it executes. The LLM resources are bound by the caller.

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from trm_assets.defs.assets.pools import pools_asset
from trm_assets.defs.assets.training import (
    baseline_cache_asset,
    epoch_asset,
    step_results_asset,
    version_specs,
)
from trm_assets.defs.checks import experiment_checks
from trm_assets.defs.experiments import Experiment
from trm_assets.defs.jobs import ExperimentJobs, experiment_jobs
from trm_assets.defs.ops import slow_ops
from trm_assets.defs.partitions import experiment_partitions, task_types_in
from trm_assets.defs.recording import Scope
from trm_assets.defs.resources import LLM_RESOURCE_KEYS, LLMResource, llm_resources
from trm_assets.defs.sensors import epoch_sensor


@dataclass(frozen=True)
class ExperimentDefs:
    scope: Scope
    jobs: ExperimentJobs
    sensor: dg.SensorDefinition  # <experiment>__epoch_sensor
    definitions: dg.Definitions

    def bound(self, resources: Mapping[str, LLMResource] | None = None) -> dg.Definitions:
        """The experiment's Definitions with LLM resources bound (default: both standard ones),
        ready to resolve and execute its jobs."""
        res = dict(resources) if resources is not None else llm_resources()
        return dg.Definitions.merge(self.definitions, dg.Definitions(resources=res))


def build_experiment(experiment: Experiment) -> ExperimentDefs:
    """Assets, checks, jobs and sensor of ``experiment`` (reads its config and question file)."""
    cfg = experiment.run_config()
    parts = experiment_partitions(experiment.name, task_types_in(cfg.questions))
    scope = Scope(experiment, parts, LLM_RESOURCE_KEYS[cfg.llm_provider])
    slow = slow_ops(scope)  # one definition per op name: shared by the asset and the job
    jobs = experiment_jobs(scope, slow)
    sensor = epoch_sensor(scope, jobs)
    definitions = dg.Definitions(
        assets=[
            pools_asset(scope),
            *version_specs(scope),
            step_results_asset(scope),
            epoch_asset(scope, slow),
            baseline_cache_asset(scope),
        ],
        asset_checks=experiment_checks(scope),
        jobs=jobs.all(),
        sensors=[sensor],
    )
    return ExperimentDefs(scope, jobs, sensor, definitions)
