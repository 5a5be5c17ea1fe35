"""Pydantic models of the JSON the diagnose and momentum calls must return (prompts/diagnose.md,
prompts/momentum.md). Evolve calls (skill, system prompt, tool description) return
:class:`trm_assets.domain.edit_schema.EditProposal`, re-exported here so the three output
schemas live side by side. Parse replies with :func:`trm_assets.evolution.calls.parse_json_reply`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trm_assets.domain.edit_schema import EditProposal


class Diagnosis(BaseModel):
    """Why one failed case failed and what should change (one entry of ``diagnoses``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question_id: str = Field(min_length=1)
    target: Literal["skill", "system", "tool"] = "skill"
    tool_name: str | None = None
    analysis: str = ""
    missing_strategy: str = ""

    @model_validator(mode="after")
    def _tool_needs_name(self) -> Diagnosis:
        if self.target == "tool" and not (self.tool_name or "").strip():
            raise ValueError("target='tool' needs 'tool_name' (the tool whose description misled)")
        return self


class DiagnosisReport(BaseModel):
    """The whole JSON object returned by a diagnose call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    diagnoses: list[Diagnosis] = Field(default_factory=list)


class MomentumGuidance(BaseModel):
    """The whole JSON object returned by a momentum call: the new momentum block text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    guidance: str


__all__ = ["Diagnosis", "DiagnosisReport", "EditProposal", "MomentumGuidance"]
