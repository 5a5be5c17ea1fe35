"""Dagster resources: the LLM providers, one interface with two implementations (the simulated
world, an OpenAI-compatible server), like Dagster's ``project_fully_featured`` ``HNClient``.

``definitions.py`` binds both under :data:`LLM_RESOURCE_KEYS`; each experiment's assets require
the key its config's ``llm_provider`` names, so one instance can serve simulated and real
experiments side by side, and a test swaps an implementation by key instead of monkeypatching.
The API key never enters a resource's config (the UI shows resource config): the OpenAI-compatible
resource reads it from the environment / ``.env`` through ``llm/settings.py``.

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

from abc import ABC, abstractmethod

import dagster as dg

from trm_assets.defs.experiments import Experiment
from trm_assets.llm.factory import ProviderConfigError, build_providers
from trm_assets.llm.providers import ProviderKind, Providers, ProviderSpec
from trm_assets.llm.settings import load_settings

LLM_RESOURCE_KEYS: dict[ProviderKind, str] = {"sim": "llm_sim", "openai": "llm_openai"}

# The experiment handle the CLI and the benchmarks build (``TrmResource(workspace=…,
# config_path=…, overrides=…)``); it is no longer a Dagster resource (the experiment is part of
# every asset key), so this is the same class under its old name.
TrmResource = Experiment


class LLMResource(dg.ConfigurableResource, ABC):  # type: ignore[type-arg]  # its value is itself
    """Builds the three model roles (agent, evolve, diagnose) of one unit of work."""

    @abstractmethod
    def providers(self, spec: ProviderSpec) -> Providers:
        """The providers for ``spec`` (the experiment config's model settings)."""


class SimulatedLLM(LLMResource):
    """The SIMULATED world of the config's ``ground_truth`` (``llm_provider: sim``)."""

    def providers(self, spec: ProviderSpec) -> Providers:
        if spec.kind != "sim":
            raise ProviderConfigError(
                f"the simulated LLM resource got a config with llm_provider: {spec.kind}; bind "
                f"this experiment to {LLM_RESOURCE_KEYS[spec.kind]!r}"
            )
        return build_providers(spec)


class OpenAICompatibleLLM(LLMResource):
    """An OpenAI-compatible endpoint (``llm_provider: openai``). Empty ``base_url``: the
    ``TRM_LLM_BASE_URL`` of the environment / ``.env``; the key is always read from there."""

    base_url: str = ""

    def providers(self, spec: ProviderSpec) -> Providers:
        if spec.kind != "openai":
            raise ProviderConfigError(
                f"the OpenAI-compatible LLM resource got a config with llm_provider: "
                f"{spec.kind}; bind this experiment to {LLM_RESOURCE_KEYS[spec.kind]!r}"
            )
        # validated like the CLI's: one line per bad variable, never the key
        settings = load_settings(**({"base_url": self.base_url} if self.base_url else {}))
        return build_providers(spec, settings)


def llm_resources() -> dict[str, LLMResource]:
    """Both implementations under their keys (what ``definitions.py`` and the driver bind)."""
    return {
        LLM_RESOURCE_KEYS["sim"]: SimulatedLLM(),
        LLM_RESOURCE_KEYS["openai"]: OpenAICompatibleLLM(),
    }
