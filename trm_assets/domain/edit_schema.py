"""The JSON edit schema the evolve model must produce (validated with pydantic).

Example (what ``prompts/evolve_skill.md`` shows the model)::

    {"edits": [
      {"op": "add", "section": "Strategy", "anchor": null,
       "text": "- Search subtitles for the counted noun before answering.",
       "rationale": "Three failed counting cases never read the subtitles."},
      {"op": "replace", "section": "Strategy", "anchor": "- Answer quickly.",
       "text": "- Answer only after checking every clip of the relevant segment.",
       "rationale": "Early answers missed late evidence."},
      {"op": "delete", "section": "Pitfalls", "anchor": "- Trust the first caption.",
       "text": "", "rationale": "Misleading."}
    ]}

Semantics (implemented by :func:`trm_assets.domain.edits.apply_edits`):

* ``section`` names a markdown heading (text after the ``#`` marks, case-insensitive, trimmed).
  ``null`` means the whole document.
* ``add``: insert ``text`` after the line containing ``anchor`` when given, else at the end of the
  section (a missing section is created at the end of the document).
* ``replace``: replace the exact substring ``anchor`` inside the section with ``text``.
* ``delete``: remove the exact substring ``anchor`` inside the section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

EditOpName = Literal["add", "replace", "delete"]


class Edit(BaseModel):
    """One proposed edit of a markdown file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: EditOpName
    section: str | None = None
    anchor: str | None = None
    text: str = ""
    rationale: str = ""

    @model_validator(mode="after")
    def _check_shape(self) -> Edit:
        if self.op in ("replace", "delete") and not self.anchor:
            raise ValueError(
                f"op={self.op!r} needs a non-empty 'anchor' (the exact text to change)"
            )
        if self.op in ("add", "replace") and not self.text.strip():
            raise ValueError(f"op={self.op!r} needs a non-empty 'text'")
        return self


class EditProposal(BaseModel):
    """The whole JSON object returned by an evolve call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    edits: list[Edit] = Field(default_factory=list)
