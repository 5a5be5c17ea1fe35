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
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ProposalMix(BaseModel):
    """What the simulated evolve model proposes, as probabilities summing to 1."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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


class SimConfig(BaseModel):
    """Simulator behaviour. Latencies in milliseconds; rates are per-call probabilities.

    Fault rates may be 1.0 (every call fails) so tests and drills can force a fault.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = Field(0, description="mixed into every hash draw of the simulator")
    latency_ms_mean: float = Field(0.0, ge=0)
    latency_ms_jitter: float = Field(0.0, ge=0, description="uniform ± jitter around the mean")
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
