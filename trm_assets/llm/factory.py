"""Build the three model roles of a run from a :class:`ProviderSpec` + ``Settings``: the one place
that chooses between the simulated world and the OpenAI-compatible provider (called by the
composition roots — ``cli``, ``defs``, the benchmarks — never by the loop).

``kind: sim`` (the default) builds the SIMULATED world from ``spec.ground_truth`` (one world shared
by the three roles; the role is read from the conversation) and its oracle. ``kind: openai`` builds
OpenAI-compatible clients from the engineering settings (base URL, key, timeouts); the key never
leaves :class:`~trm_assets.llm.settings.Settings`. With a real model there is no oracle, so every
expected accuracy is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Unpack

from trm_assets.domain.errors import TrmError
from trm_assets.llm.protocol import LLMProvider
from trm_assets.llm.providers import Providers, ProviderSpec
from trm_assets.llm.settings import Settings, load_settings
from trm_assets.llm.sim.world import SimWorld, load_world
from trm_assets.llm.sim_config import SimConfig

if TYPE_CHECKING:
    from trm_assets.llm.sim.oracle import Instructions


class ProviderConfigError(TrmError):
    """A configuration that cannot produce the model clients (missing URL, missing sidecar)."""


class SimOracle:
    """:class:`~trm_assets.llm.providers.AccuracyOracle` of a simulated world."""

    def __init__(self, world: SimWorld, config: SimConfig) -> None:
        self.world = world
        self.config = config

    def expected_by_question(
        self, question_ids: Sequence[str], skills: Mapping[str, str], **kw: Unpack[Instructions]
    ) -> dict[str, float]:
        from trm_assets.llm.sim.oracle import expected_by_question

        return expected_by_question(self.world, question_ids, skills, self.config, **kw)


def build_providers(spec: ProviderSpec, settings: Settings | None = None) -> Providers:
    """Build the providers named by ``spec.kind`` (see the module docstring)."""
    if spec.kind == "sim":
        from trm_assets.llm.sim.provider import SimulatedProvider

        if not spec.ground_truth:
            raise ProviderConfigError(
                "config: llm_provider is 'sim' but ground_truth is null; point ground_truth at the "
                "sample's ground_truth.json (e.g. data/smoke/ground_truth.json)"
            )
        world = load_world(spec.ground_truth)
        return Providers(
            agent=SimulatedProvider(world, spec.sim, model=spec.agent_model),
            evolve=SimulatedProvider(world, spec.sim, model=spec.evolve_model),
            diagnose=SimulatedProvider(world, spec.sim, model=spec.diagnose_model),
            oracle=SimOracle(world, spec.sim),
            simulated=True,
        )
    from trm_assets.llm.openai_compat import OpenAICompatProvider

    s = endpoint_settings(settings)

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
            tool_mode=s.tool_mode,
        )

    return Providers(
        agent=client(spec.agent_model),
        evolve=client(spec.evolve_model),
        diagnose=client(spec.diagnose_model),
        oracle=None,
        simulated=False,
    )


def endpoint_settings(settings: Settings | None = None) -> Settings:
    """The ``TRM_LLM_*`` settings of a real endpoint, checked as a run needs them (also by
    ``trm train --dry-run``, which makes no call)."""
    s = settings if settings is not None else load_settings()
    if not s.base_url:
        raise ProviderConfigError(
            "llm_provider is 'openai' but TRM_LLM_BASE_URL is not set; put the endpoint's API "
            "root (e.g. http://127.0.0.1:8000/v1) in the environment or .env"
        )
    return s
