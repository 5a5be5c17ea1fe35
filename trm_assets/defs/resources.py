"""Dagster resources: which config and which workspace a run works on."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from trm_assets.harness.config import RunConfig, load_config

DEFAULT_CONFIG = "data/configs/default.yaml"
DEFAULT_WORKSPACE = "workspaces/default"


class TrmResource(dg.ConfigurableResource):
    """The experiment: a YAML config (with ``--set``-style overrides) and its workspace dir."""

    config_path: str = DEFAULT_CONFIG
    workspace: str = DEFAULT_WORKSPACE
    overrides: list[str] = Field(default_factory=list)

    def run_config(self) -> RunConfig:
        return load_config(self.config_path, self.overrides)

    def workspace_dir(self) -> Path:
        return Path(self.workspace)
