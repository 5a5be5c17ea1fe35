"""Knobs of the simulated world (SPEC §7). Part of ``RunConfig`` as the ``sim`` section.

The default proposal mix is fixed from the literature's picture of LLM-proposed edits (most are
neutral or harmful) *before* any benchmark ran; benchmarks may sweep it but never retune it.
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
    """Simulator behaviour. Latencies in milliseconds; rates are per call probabilities."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    latency_ms_mean: float = Field(0.0, ge=0)
    latency_ms_jitter: float = Field(0.0, ge=0)
    fault_timeout_rate: float = Field(0.0, ge=0, lt=1)
    fault_http_5xx_rate: float = Field(0.0, ge=0, lt=1)
    fault_malformed_rate: float = Field(0.0, ge=0, lt=1)
    ability: float = Field(0.0, description="a in P = g + (1-g)·σ(a − d + b·cue − c·harm)")
    cue_strength: float = Field(2.5, ge=0, description="b: log-odds gain when the cue is expressed")
    harm_strength: float = Field(2.0, ge=0, description="c: log-odds loss per harmful directive")
    difficulty_scale: float = Field(1.0, ge=0, description="multiplies each question's difficulty")
    guess: float = Field(0.25, ge=0, lt=1, description="g: chance level of a 4-option question")
    diagnose_cue_prob: float = Field(0.6, ge=0, le=1, description="q: diagnosis names the true cue")
    proposal_mix: ProposalMix = Field(default_factory=ProposalMix)
