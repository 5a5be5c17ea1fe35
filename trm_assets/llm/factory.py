"""The three model roles of a run (agent, evolve, diagnose) built from ``RunConfig`` + ``Settings``.

``llm_provider: sim`` (the default) builds the SIMULATED world from ``cfg.ground_truth`` (one
world shared by the three roles; the role is read from the conversation). ``llm_provider:
openai`` builds OpenAI-compatible clients from the engineering settings (base URL, key, timeouts);
the key never leaves :class:`~trm_assets.harness.settings.Settings`. With a real model there is no
oracle, so every expected accuracy is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass

from trm_assets.domain.errors import TrmError
from trm_assets.harness.config import RunConfig
from trm_assets.harness.settings import Settings
from trm_assets.llm.protocol import LLMProvider
from trm_assets.llm.sim.world import SimWorld, load_world


class ProviderConfigError(TrmError):
    """A configuration that cannot produce the model clients (missing URL, missing sidecar)."""


@dataclass(frozen=True)
class Providers:
    """The model clients of one run. ``world`` is the simulator's ground truth (sim only)."""

    agent: LLMProvider
    evolve: LLMProvider
    diagnose: LLMProvider
    world: SimWorld | None
    simulated: bool

    def label(self) -> str:
        return "SIMULATED world" if self.simulated else f"model {self.agent.model}"


def build_providers(cfg: RunConfig, settings: Settings | None = None) -> Providers:
    """Build the providers named by ``cfg.llm_provider`` (see the module docstring)."""
    if cfg.llm_provider == "sim":
        from trm_assets.llm.sim.provider import SimulatedProvider

        if not cfg.ground_truth:
            raise ProviderConfigError(
                "config: llm_provider is 'sim' but ground_truth is null; point ground_truth at the "
                "sample's ground_truth.json (e.g. data/smoke/ground_truth.json)"
            )
        world = load_world(cfg.ground_truth)
        return Providers(
            agent=SimulatedProvider(world, cfg.sim, model=cfg.agent_model),
            evolve=SimulatedProvider(world, cfg.sim, model=cfg.evolve_model),
            diagnose=SimulatedProvider(world, cfg.sim, model=cfg.effective_diagnose_model()),
            world=world,
            simulated=True,
        )
    from trm_assets.llm.openai_compat import OpenAICompatProvider

    s = settings if settings is not None else Settings()
    if not s.base_url:
        raise ProviderConfigError(
            "llm_provider is 'openai' but TRM_LLM_BASE_URL is not set; put the endpoint's API "
            "root (e.g. http://127.0.0.1:8000/v1) in the environment or .env"
        )

    def client(model: str) -> LLMProvider:
        return OpenAICompatProvider(
            base_url=str(s.base_url),
            model=model,
            api_key=s.api_key,
            timeout_s=s.timeout_s,
            max_retries=s.max_retries,
            max_concurrency=s.max_concurrency,
            price_prompt_per_1k=s.price_prompt_per_1k,
            price_completion_per_1k=s.price_completion_per_1k,
        )

    return Providers(
        agent=client(cfg.agent_model),
        evolve=client(cfg.evolve_model),
        diagnose=client(cfg.effective_diagnose_model()),
        world=None,
        simulated=False,
    )
