"""The model clients of one run, as the loop sees them: three roles and an optional oracle.

The loop (``harness/``) receives a :class:`Providers` from its composition root (``cli``,
``defs``, the benchmarks: :func:`trm_assets.llm.factory.build_providers`) and never imports the
simulator: what only the simulated world can give — the noise-free expected accuracy of a version
— comes through the :class:`AccuracyOracle` protocol, ``None`` with a real model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from trm_assets.llm.protocol import LLMProvider
from trm_assets.llm.sim_config import SimConfig

ProviderKind = Literal["sim", "openai"]


class AccuracyOracle(Protocol):
    """The expected (noise-free) accuracy of an instruction set on some questions.

    Contract: deterministic; ``question_ids`` non-empty and known to the world (else ``KeyError``);
    returns one probability per question id, keyed and sorted by id. Only a simulated world has
    one: it is the benchmark's ground truth, never an input to a decision.
    """

    def expected_by_question(
        self,
        question_ids: Sequence[str],
        skills: Mapping[str, str],
        *,
        system_prompt: str,
        tool_descriptions: Sequence[str],
        skill_mode: Literal["task", "all", "none"],
    ) -> dict[str, float]: ...


@dataclass(frozen=True)
class ProviderSpec:
    """What the config says about the models (no secrets: those are in ``Settings``)."""

    kind: ProviderKind
    agent_model: str
    evolve_model: str
    diagnose_model: str
    ground_truth: str | None
    sim: SimConfig


@dataclass(frozen=True)
class Providers:
    """The model clients of one run (agent, evolve, diagnose) and the oracle (sim only)."""

    agent: LLMProvider
    evolve: LLMProvider
    diagnose: LLMProvider
    oracle: AccuracyOracle | None
    simulated: bool

    def label(self) -> str:
        return "SIMULATED world" if self.simulated else f"model {self.agent.model}"
