"""Applying evolve-model edits to a skill markdown file, the edit budget, the protected momentum
block, rejected-buffer entries and skill-file path safety.

The edit JSON schema is :mod:`trm_assets.domain.edit_schema` (fixed); this module implements its
semantics. Every edit gets one status:

* ``applied``: the text changed as asked;
* ``not_found``: the section (replace/delete) or the anchor does not exist;
* ``conflict``: the edit would touch the protected momentum block, its anchor is ambiguous (more
  than one match in the section), it names a momentum marker, or an earlier edit of the same bundle
  already changed its anchor;
* ``over_budget``: it comes after the first ``budget`` edits of the proposal (never looked at).

Step edits can never touch the momentum block (delimited by the exact lines
``<!-- momentum:begin -->`` and ``<!-- momentum:end -->``); only the slow update rewrites it, via
:func:`replace_momentum`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Final, Literal

from trm_assets.domain.edit_schema import Edit
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.gate import Verdict, rejection_tag

MOMENTUM_BEGIN: Final = "<!-- momentum:begin -->"
MOMENTUM_END: Final = "<!-- momentum:end -->"

EditStatus = Literal["applied", "not_found", "conflict", "over_budget"]
APPLIED: Final = "applied"
NOT_FOUND: Final = "not_found"
CONFLICT: Final = "conflict"
OVER_BUDGET: Final = "over_budget"

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


# --------------------------------------------------------------------------------------------
# The momentum block


def _line_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end-including-newline, line-without-newline) for every line."""
    spans = []
    pos = 0
    for line in text.splitlines(keepends=True):
        spans.append((pos, pos + len(line), line.rstrip("\r\n")))
        pos += len(line)
    return spans


def protected_span(text: str, source: str = "skill file") -> tuple[int, int] | None:
    """Character span [start, end) of the momentum block including its marker lines, or None.

    A begin without end, an end without begin, a reversed pair or a second block is corrupt and
    raises :class:`DataFormatError`.
    """
    begins = [
        (i, s) for i, (s, _, ln) in enumerate(_line_spans(text)) if ln.rstrip() == MOMENTUM_BEGIN
    ]
    ends = [(i, e) for i, (_, e, ln) in enumerate(_line_spans(text)) if ln.rstrip() == MOMENTUM_END]
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0][0] <= begins[0][0]:
        raise DataFormatError(
            source,
            None,
            "momentum block",
            f"exactly one {MOMENTUM_BEGIN!r} line followed by one {MOMENTUM_END!r} line "
            f"(found {len(begins)} begin and {len(ends)} end marker lines)",
        )
    return begins[0][1], ends[0][1]


def momentum_inner(text: str) -> str | None:
    """The text between the momentum marker lines (without them), or None when there is no block."""
    span = protected_span(text)
    if span is None:
        return None
    lines = _line_spans(text[span[0] : span[1]])
    return "".join(text[span[0] + s : span[0] + e] for s, e, _ in lines[1:-1])


def replace_momentum(text: str, new_inner: str) -> str:
    """Replace the momentum block's inner text (append a new block at the end when absent)."""
    if MOMENTUM_BEGIN in new_inner or MOMENTUM_END in new_inner:
        raise ValueError("momentum guidance must not contain the momentum marker lines")
    inner = new_inner if not new_inner or new_inner.endswith("\n") else new_inner + "\n"
    block = f"{MOMENTUM_BEGIN}\n{inner}{MOMENTUM_END}\n"
    span = protected_span(text)
    if span is None:
        base = text if not text or text.endswith("\n") else text + "\n"
        return base + ("\n" if base else "") + block
    return text[: span[0]] + block + text[span[1] :]


# --------------------------------------------------------------------------------------------
# Sections


def section_span(text: str, section: str | None) -> tuple[int, int] | None:
    """Character span of a section's body (after its heading line, up to the next heading of the
    same or a higher level), the whole text for ``None``, or None when the heading is absent.

    Headings inside code fences or inside the momentum block do not count.
    """
    if section is None:
        return 0, len(text)
    protected = protected_span(text)
    wanted = section.strip().lower()
    in_fence = False
    start: int | None = None
    level = 0
    for s, e, line in _line_spans(text):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or (protected is not None and protected[0] <= s < protected[1]):
            continue
        m = _HEADING.match(line)
        if m is None:
            continue
        if start is not None and len(m.group(1)) <= level:
            return start, s
        if start is None and m.group(2).strip().lower() == wanted:
            start, level = e, len(m.group(1))
    return (start, len(text)) if start is not None else None


# --------------------------------------------------------------------------------------------
# apply_edits


@dataclass(frozen=True, slots=True)
class EditResult:
    index: int
    edit: Edit
    status: EditStatus
    detail: str


@dataclass(frozen=True, slots=True)
class ApplyReport:
    original: str
    text: str
    results: tuple[EditResult, ...]

    @property
    def applied(self) -> tuple[Edit, ...]:
        return tuple(r.edit for r in self.results if r.status == APPLIED)

    @property
    def n_applied(self) -> int:
        return len(self.applied)

    @property
    def changed(self) -> bool:
        return self.text != self.original


def _overlaps(start: int, end: int, span: tuple[int, int] | None) -> bool:
    return span is not None and start < span[1] and end > span[0]


def _apply_one(text: str, original: str, edit: Edit) -> tuple[str, EditStatus, str]:
    for field_name, value in (("text", edit.text), ("anchor", edit.anchor or "")):
        if MOMENTUM_BEGIN in value or MOMENTUM_END in value:
            return text, CONFLICT, f"{field_name} names a momentum marker"
    protected = protected_span(text)
    span = section_span(text, edit.section)
    if span is None:
        if edit.op == "add" and not edit.anchor:
            base = text if not text or text.endswith("\n") else text + "\n"
            body = edit.text if edit.text.endswith("\n") else edit.text + "\n"
            new = base + ("\n" if base else "") + f"## {edit.section}\n{body}"
            return new, APPLIED, f"created section {edit.section!r} at the end"
        return text, NOT_FOUND, f"section {edit.section!r} not found"
    s_start, s_end = span
    if edit.anchor:
        hits = [m.start() for m in re.finditer(re.escape(edit.anchor), text[s_start:s_end])]
        hits = [s_start + h for h in hits]
        free = [h for h in hits if not _overlaps(h, h + len(edit.anchor), protected)]
        if not free:
            if hits:
                return text, CONFLICT, "anchor lies inside the protected momentum block"
            if edit.anchor in original:
                return text, CONFLICT, "anchor was changed by an earlier edit of this bundle"
            return text, NOT_FOUND, "anchor not found in the section"
        if len(free) > 1:
            return text, CONFLICT, f"anchor is ambiguous ({len(free)} matches in the section)"
        at, end = free[0], free[0] + len(edit.anchor)
        if edit.op == "replace":
            return text[:at] + edit.text + text[end:], APPLIED, "replaced"
        if edit.op == "delete":
            line_start = text.rfind("\n", 0, at) + 1
            line_end = text.find("\n", end)
            if (
                text[line_start:at].strip() == ""
                and text[end : (line_end if line_end >= 0 else len(text))].strip() == ""
            ):
                end = line_end + 1 if line_end >= 0 else len(text)
                at = line_start
            return text[:at] + text[end:], APPLIED, "deleted"
        nl = text.find("\n", end)  # add after the line containing the anchor
        pos = nl + 1 if nl >= 0 else len(text)
    else:
        pos = s_end
        while pos > s_start and text[pos - 2 : pos] == "\n\n":  # before trailing blank lines
            pos -= 1
    if protected is not None and protected[0] < pos < protected[1]:
        return text, CONFLICT, "insertion point lies inside the protected momentum block"
    prefix = "" if pos == 0 or text[pos - 1] == "\n" else "\n"
    body = edit.text if edit.text.endswith("\n") else edit.text + "\n"
    return text[:pos] + prefix + body + text[pos:], APPLIED, "added"


def apply_edits(text: str, edits: Sequence[Edit], *, budget: int) -> ApplyReport:
    """Apply edits in order to a skill file's text; returns the new text and a per-edit report.

    Only the first ``budget`` edits are considered (the rest are ``over_budget``). The momentum
    block is byte-for-byte identical before and after (checked). A corrupt momentum block raises
    :class:`DataFormatError`.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    inner_before = momentum_inner(text)
    current = text
    results: list[EditResult] = []
    for i, edit in enumerate(edits):
        if i >= budget:
            results.append(EditResult(i, edit, OVER_BUDGET, f"edit budget is {budget}"))
            continue
        current, status, detail = _apply_one(current, text, edit)
        results.append(EditResult(i, edit, status, detail))
    if momentum_inner(current) != inner_before:  # invariant, never expected to fire
        raise RuntimeError("apply_edits changed the protected momentum block")
    return ApplyReport(text, current, tuple(results))


# --------------------------------------------------------------------------------------------
# Edit budget schedule


@dataclass(frozen=True, slots=True)
class EditBudgetSchedule:
    """Cosine schedule of the per-step edit budget from ``start`` (first step) to ``end`` (last).

    ``end`` is also the slow update's budget (:func:`edit_budget_end`). See
    ``docs/decision-edit-budget-schedule.md`` for the alternatives considered.
    """

    start: int
    end: int
    epochs: int
    steps_per_epoch: int

    def __post_init__(self) -> None:
        if not self.start >= self.end >= 1:
            raise ValueError(f"need start >= end >= 1, got start={self.start}, end={self.end}")
        if self.epochs < 1 or self.steps_per_epoch < 1:
            raise ValueError("epochs and steps_per_epoch must be >= 1")


def edit_budget_at(epoch: int, step: int, schedule: EditBudgetSchedule) -> int:
    """Budget for (0-based) ``epoch``/``step``: round(end + (start−end)·(1+cos πt)/2),
    t = global step / (total steps − 1); monotone non-increasing from start to end."""
    if not 0 <= epoch < schedule.epochs or not 0 <= step < schedule.steps_per_epoch:
        raise ValueError(
            f"(epoch, step)=({epoch}, {step}) outside 0..{schedule.epochs - 1} × "
            f"0..{schedule.steps_per_epoch - 1}"
        )
    total = schedule.epochs * schedule.steps_per_epoch
    t = (epoch * schedule.steps_per_epoch + step) / (total - 1) if total > 1 else 1.0
    value = schedule.end + (schedule.start - schedule.end) * (1.0 + math.cos(math.pi * t)) / 2.0
    return max(schedule.end, min(schedule.start, math.floor(value + 0.5)))


def edit_budget_end(schedule: EditBudgetSchedule) -> int:
    """The end-of-run budget, used by the slow update's system/tool prompt evolution."""
    return schedule.end


# --------------------------------------------------------------------------------------------
# Rejected buffer (SPEC 5.3, GATE §4.3)


@dataclass(frozen=True, slots=True)
class RejectedEdit:
    """A rejected edit; plain fields, so checkpoints rebuild it with ``RejectedEdit(**d)``."""

    skill_file: str
    op: str
    section: str | None
    anchor: str | None
    text: str
    rationale: str
    verdict: str
    tag: str  # "verified_harmful" only on REJECT_HARM, else "not_verified"
    wins: int
    losses: int


def rejected_entries(
    report: ApplyReport, verdict: Verdict, *, skill_file: str, wins: int = 0, losses: int = 0
) -> tuple[RejectedEdit, ...]:
    """Rejected-buffer entries for a rejected candidate: only edits whose status was ``applied``
    (the others never reached the candidate text and were never tested)."""
    tag = rejection_tag(verdict)
    return tuple(
        RejectedEdit(
            skill_file=skill_file,
            op=e.op,
            section=e.section,
            anchor=e.anchor,
            text=e.text,
            rationale=e.rationale,
            verdict=verdict.value,
            tag=tag,
            wins=wins,
            losses=losses,
        )
        for e in report.applied
    )


# --------------------------------------------------------------------------------------------
# Path safety


class UnsafeSkillPathError(ValueError):
    """A skill file name that could escape the skills directory."""


def resolve_skill_file(skills_dir: Path, name: str) -> Path:
    """``skills_dir / name`` after refusing anything that is not a plain ``*.md`` file name inside
    ``skills_dir``: absolute paths, separators, ``..``, NUL, symlinks, and any resolution that lands
    outside the directory. The file need not exist yet."""
    bad = (
        not name
        or "\x00" in name
        or PurePosixPath(name).is_absolute()
        or PureWindowsPath(name).is_absolute()
        or PureWindowsPath(name).drive != ""
        or "/" in name
        or "\\" in name
        or name in (".", "..")
        or ".." in PurePosixPath(name).parts
        or not name.endswith(".md")
        or name.startswith(".")
    )
    if bad:
        raise UnsafeSkillPathError(
            f"skill file name {name!r} must be a plain '<name>.md' inside the skills directory "
            "(no absolute path, separator, '..' or hidden file)"
        )
    base = skills_dir.resolve()
    candidate = skills_dir / name
    if candidate.is_symlink():
        raise UnsafeSkillPathError(f"skill file {name!r} is a symbolic link; refusing to follow it")
    resolved = candidate.resolve()
    if resolved.parent != base:
        raise UnsafeSkillPathError(f"skill file {name!r} resolves outside {base}")
    return resolved
