"""The simulated world (SPEC §7, issue 4): a deterministic simulator with hidden ground truth.

* :mod:`.generator` — ``trm data synth``: videos, trees, Video-MME-format questions, sidecar;
* :mod:`.world` — the ground truth (:func:`load_world`, :class:`SimWorld`);
* :mod:`.provider` — :class:`SimulatedProvider`, the ``LLMProvider`` of the simulator;
* :mod:`.decoding` — temperature, per-text perturbation and context dilution (issue 15);
* :mod:`.oracle` — expected and best achievable accuracy, computed analytically;
* :mod:`.server` — ``trm sim-serve``, an OpenAI-compatible HTTP server.

Everything it produces is labelled SIMULATED.
"""

from trm_assets.llm.sim.oracle import (
    best_expected_accuracy,
    expected_accuracy,
    expected_by_question,
    optimal_skills,
    oracle_table,
)
from trm_assets.llm.sim.provider import SIM_MODEL, SimulatedProvider
from trm_assets.llm.sim.world import SimWorld, load_world

__all__ = [
    "SIM_MODEL",
    "SimWorld",
    "SimulatedProvider",
    "best_expected_accuracy",
    "expected_accuracy",
    "expected_by_question",
    "load_world",
    "optimal_skills",
    "oracle_table",
]
