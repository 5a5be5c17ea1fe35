"""Dagster resources: the experiment (workspace + config). The LLM providers are built from the
config (simulated by default, OpenAI-compatible when ``llm_provider: openai``) and the run log
(DuckDB) lives in the workspace; both are opened per unit of work by the harness.

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field

from trm_assets.harness.data.config import RunConfig, load_config
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.llm.factory import build_providers

DEFAULT_CONFIG = "data/configs/default.yaml"
DEFAULT_WORKSPACE = "workspaces/default"


class TrmResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # its value is itself
    """One experiment. ``config_path`` empty → the config ``trm init`` stored in the workspace
    (falling back to the default simulated config before the workspace exists)."""

    workspace: str = DEFAULT_WORKSPACE
    config_path: str = ""
    overrides: list[str] = Field(default_factory=list)

    def workspace_dir(self) -> Path:
        return Path(self.workspace)

    def resolved_config_path(self) -> str:
        if self.config_path:
            return self.config_path
        stored = self.workspace_dir() / "config.yaml"
        return str(stored) if stored.is_file() else DEFAULT_CONFIG

    def run_config(self) -> RunConfig:
        return load_config(self.resolved_config_path(), self.overrides)

    @contextmanager
    def open(self) -> Iterator[LoopContext]:
        """A loop context for one unit of work (closes the run log afterwards)."""
        cfg = self.run_config()
        with loop_context(self.workspace_dir(), cfg, build_providers(cfg.provider_spec())) as ctx:
            yield ctx


def default_resource() -> TrmResource:
    """The resource of this code location: ``TRM_DAGSTER_WORKSPACE`` / ``TRM_DAGSTER_CONFIG``
    select another experiment without editing code."""
    return TrmResource(
        workspace=os.environ.get("TRM_DAGSTER_WORKSPACE", DEFAULT_WORKSPACE),
        config_path=os.environ.get("TRM_DAGSTER_CONFIG", ""),
    )
