"""Knobs of the simulated world (SPEC §7). Part of ``RunConfig`` as the ``sim`` section.

The default proposal mix is fixed from the literature's picture of LLM-proposed edits (most are
neutral or harmful) *before* any benchmark ran; benchmarks may sweep it but never retune it.

The agent's probability of answering a question correctly is (issue 4)::

    P = guess + (1 − guess) · σ(ability − difficulty_scale·d
                                + cue_strength·[cue] − harm_strength·[harm])

where ``d`` is the question's hidden difficulty (``ground_truth.json``), ``[cue]`` is 1 when the
instruction text the agent reads expresses the question's hidden cue and ``[harm]`` is 1 when it
contains a harmful directive of the question's task type. Defaults were chosen (docs/
decision-simulator-model.md) so the committed default sample goes from ≈45% (seed skills) to ≈80%
(optimal skills) expected accuracy.

**Decoding (issue 15, docs/decision-sim-decoding-profiles.md).** The agent honours the request's
``temperature``: at 0 its answer is a deterministic function of (question, instruction text), above
0 a fresh draw per sample index. ``text_flip_rate`` gives every instruction text its own mean-zero
per-question perturbation (two neutral rewordings flip that share of answers at temperature 0),
``length_cost`` removes log-odds per 100 words read beyond the seed prompt set (context dilution).
``temperature_scale`` makes draws at a low temperature near-replays of the greedy answer
(docs/decision-low-temperature.md); at its default 0 every draw above 0 is fresh.

**Profiles.** ``profile`` names a set of defaults (:data:`PROFILES`): ``default`` is the world of
issue 4 unchanged, ``realistic`` a temperature-0 agent whose answers move under rewording and long
instructions, with weaker cues and harms. A key given explicitly (YAML ``sim:``, ``--set sim.KEY``,
``TRM_SIM__KEY``) overrides the profile's value for that key only; ``proposal_mix`` merges per
category. The values were fixed by issue 15 before any result; benchmarks may sweep, never retune.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

SimProfile = Literal["default", "realistic"]

#: Per profile, the value of every field it sets (issue 15; do not tune after seeing results).
PROFILES: Final[Mapping[str, Mapping[str, Any]]] = {
    "default": {
        "agent_temperature": 1.0,
        "text_flip_rate": 0.0,
        "length_cost": 0.0,
        "cue_strength": 2.3,
        "harm_strength": 2.0,
        "proposal_mix": {"cue": 0.20, "neutral": 0.50, "harmful": 0.20, "malformed": 0.10},
    },
    "realistic": {
        "agent_temperature": 0.0,
        "text_flip_rate": 0.15,
        "length_cost": 0.05,
        "cue_strength": 1.5,
        "harm_strength": 1.5,
        "proposal_mix": {"cue": 0.15, "neutral": 0.55, "harmful": 0.20, "malformed": 0.10},
    },
}


class NoBoolNumbers(BaseModel):
    """A config model whose number fields refuse ``true`` / ``false`` (pydantic reads them as 1
    and 0 in lax mode: ``epochs: true`` trained one epoch, ``agent_temperature: true`` at 1.0)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation is not bool and bool not in get_args(annotation):
                raise ValueError(f"expected a number, not {str(value).lower()}")
        return value


class ProposalMix(NoBoolNumbers):
    """What the simulated evolve model proposes, as probabilities summing to 1."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    cue: float = Field(0.20, ge=0, le=1, description="an edit expressing the failing case's cue")
    neutral: float = Field(0.50, ge=0, le=1, description="a plausible edit with no effect")
    harmful: float = Field(0.20, ge=0, le=1, description="a harmful directive")
    malformed: float = Field(0.10, ge=0, le=1, description="output that is not valid edit JSON")

    @model_validator(mode="after")
    def _sums_to_one(self) -> ProposalMix:
        total = self.cue + self.neutral + self.harmful + self.malformed
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"proposal mix must sum to 1, got {total:.4f}")
        return self


class SimConfig(NoBoolNumbers):
    """Simulator behaviour. Latencies in milliseconds; rates are per-call probabilities.

    Fault rates may be 1.0 (every call fails) so tests and drills can force a fault.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    profile: SimProfile = Field(
        "default", description="named defaults (PROFILES); explicit keys override its values"
    )
    seed: int = Field(0, description="mixed into every hash draw of the simulator")
    latency_ms_mean: float = Field(0.0, ge=0, le=60_000)
    latency_ms_jitter: float = Field(
        0.0, ge=0, le=60_000, description="uniform ± jitter around the mean"
    )
    fault_timeout_rate: float = Field(0.0, ge=0, le=1, description="call times out (infra)")
    fault_http_5xx_rate: float = Field(0.0, ge=0, le=1, description="HTTP 500/503 (infra)")
    fault_malformed_rate: float = Field(
        0.0, ge=0, le=1, description="well-formed reply with unusable content (task failure)"
    )
    timeout_sleep_s: float = Field(
        0.0, ge=0, description="in-process provider: seconds slept before raising a timeout"
    )
    ability: float = Field(0.0, description="a in P = g + (1-g)·σ(a − d + b·cue − c·harm)")
    cue_strength: float = Field(2.3, ge=0, description="b: log-odds gain when the cue is expressed")
    harm_strength: float = Field(
        2.0, ge=0, description="c: log-odds loss when a harmful directive is present"
    )
    difficulty_scale: float = Field(1.0, ge=0, description="multiplies each question's difficulty")
    guess: float = Field(0.25, ge=0, lt=1, description="g: chance level of a 4-option question")
    diagnose_cue_prob: float = Field(0.6, ge=0, le=1, description="q: diagnosis names the true cue")
    diagnose_system_prob: float = Field(
        0.10, ge=0, le=1, description="a diagnosis targets the system prompt instead of the skill"
    )
    diagnose_tool_prob: float = Field(
        0.10, ge=0, le=1, description="a diagnosis targets a tool description instead of the skill"
    )
    proposal_mix: ProposalMix = Field(default_factory=ProposalMix)
    agent_temperature: float = Field(
        1.0,
        ge=0,
        le=2,
        description="the agent's decoding temperature when a request names none (0 = greedy: "
        "the answer depends on question and text only); the default of RunConfig's agent "
        "temperature with the simulator",
    )
    text_flip_rate: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="share of a question pool's answers that two neutral rewordings of its "
        "instructions flip at temperature 0 (mean-zero per (question, text) perturbation)",
    )
    length_cost: float = Field(
        0.0,
        ge=0,
        description="log-odds lost per 100 words of instruction text beyond the seed prompt "
        "set's length for the question's task type (context dilution)",
    )
    temperature_scale: float = Field(
        0.0,
        ge=0,
        le=10,
        description="τ: at a temperature T > 0 two draws of one prompt share a latent "
        "correlation exp(−(T/τ)²) with the greedy answer (a low temperature nearly replays it, as "
        "on a real server); 0 = every draw above temperature 0 is fresh (issue 4)",
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        """Fill every key the input leaves unset with the named profile's value."""
        if not isinstance(data, Mapping):
            return data
        name = data.get("profile", "default")
        values = PROFILES.get(name) if isinstance(name, str) else None
        if values is None:  # the field's own validation names the allowed profiles
            return data
        out = dict(data)
        for key, value in values.items():
            if key not in out:
                out[key] = dict(value) if isinstance(value, Mapping) else value
            elif key == "proposal_mix" and isinstance(out[key], Mapping):
                out[key] = {**value, **out[key]}  # ``sim.proposal_mix.cue=…`` keeps the rest
        return out

    @model_validator(mode="after")
    def _faults_leave_room(self) -> SimConfig:
        if self.fault_timeout_rate + self.fault_http_5xx_rate > 1.0 + 1e-9:
            raise ValueError(
                "fault_timeout_rate + fault_http_5xx_rate must be <= 1, got "
                f"{self.fault_timeout_rate + self.fault_http_5xx_rate:.3f}"
            )
        if self.diagnose_system_prob + self.diagnose_tool_prob > 1.0 + 1e-9:
            raise ValueError("diagnose_system_prob + diagnose_tool_prob must be <= 1")
        return self


def latent_correlation(temperature_scale: float, temperature: float) -> float:
    """r(T) of ``sim.temperature_scale`` τ: 1 at T ≤ 0, ``exp(−(T/τ)²)`` above, 0 with τ = 0."""
    if temperature <= 0.0:
        return 1.0
    if temperature_scale <= 0.0 or temperature > 40.0 * temperature_scale:
        return 0.0  # exp(−1600) is 0 in floating point; the ratio itself may overflow
    return math.exp(-((temperature / temperature_scale) ** 2))


#: the world file of a sample directory (``trm data synth`` writes it)
GROUND_TRUTH_FILE: Final = "ground_truth.json"


def world_file(path: str | Path) -> Path:
    """The world file a ``ground_truth`` setting names: a sample directory's
    ``ground_truth.json``, or the path itself (the simulator reads it; the loop digests it)."""
    p = Path(path)
    return p / GROUND_TRUTH_FILE if p.is_dir() else p


def prompt_draw_worst_case(config: SimConfig, temperature: float) -> float:
    """The most two simulated draws of one prompt share over questions (the least favourable
    null's value, what the config check bounds). Without ``text_flip_rate`` it is r(T). With
    f > 0 it is 1: on a question with 2p(1 − p) ≤ f (p near 0 or 1) the text-to-text
    correlation is 0 (:func:`trm_assets.llm.sim.decoding.flip_correlation`), so the text's own
    shift decides the answer and every draw of one text repeats it, at any temperature. A pool
    of such questions (every p = 0.92 at f = 0.15) gives three passes 15.2% false accepts at
    α = .05 (review, N = 50, 3,000 replicates). The least shared question is p = ½, where the
    text-to-text correlation is cos(πf) and two draws share ``1 − cos(πf)·(1 − r)``: the
    value a3ca453's check bounded (4.6% false accepts at f = 0.15)."""
    if config.text_flip_rate > 0.0:
        return 1.0
    return latent_correlation(config.temperature_scale, temperature)


#: SimConfig fields that never change an agent rollout's answer (timing, infrastructure faults,
#: which a reused row never carries, and the evolve/diagnose side). Every other field is part of
#: the simulated model's identity in the temperature-0 reuse key (``LoopContext._decoding``).
SIM_NOT_ANSWERS: Final[frozenset[str]] = frozenset(
    {
        "latency_ms_mean",
        "latency_ms_jitter",
        "fault_timeout_rate",
        "fault_http_5xx_rate",
        "timeout_sleep_s",
        "diagnose_cue_prob",
        "diagnose_system_prob",
        "diagnose_tool_prob",
        "proposal_mix",
    }
)
assert set(SimConfig.model_fields) >= SIM_NOT_ANSWERS


def sim_dump(config: SimConfig, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``config`` as JSON values for an identity (a hash), without ``exclude``.
    ``temperature_scale`` at 0 (fresh draws, the world before the knob existed) is left out, so
    the identities recorded before it keep their value."""
    out = config.model_dump(mode="json", exclude=set(exclude))
    if not config.temperature_scale:
        out.pop("temperature_scale", None)
    return out


def answer_world(config: SimConfig) -> dict[str, Any]:
    """The simulated model's identity: every key but :data:`SIM_NOT_ANSWERS` (:func:`sim_dump`)."""
    return sim_dump(config, SIM_NOT_ANSWERS)
