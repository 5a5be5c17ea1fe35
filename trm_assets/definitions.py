"""The code location: every experiment of the instance (``defs/experiments.py``) with its assets,
checks, jobs and sensor, and the LLM resources — simulated world or OpenAI-compatible server —
each experiment's assets pick by their config's ``llm_provider``."""

import warnings

import dagster as dg

from trm_assets.defs.build import build_experiment
from trm_assets.defs.experiments import code_location_experiments
from trm_assets.defs.resources import LLM_RESOURCE_KEYS, OpenAICompatibleLLM, SimulatedLLM
from trm_assets.domain.errors import TrmError


def _experiments() -> list[dg.Definitions]:
    out = []
    for exp in code_location_experiments():
        try:
            out.append(build_experiment(exp).definitions)
        except (TrmError, OSError) as e:  # one broken entry must not hide the others
            warnings.warn(f"experiment {exp.name} ({exp.workspace}) not served: {e}", stacklevel=1)
    return out


defs = dg.Definitions.merge(
    *_experiments(),
    dg.Definitions(
        resources={
            LLM_RESOURCE_KEYS["sim"]: SimulatedLLM(),
            LLM_RESOURCE_KEYS["openai"]: OpenAICompatibleLLM(),
        }
    ),
)
