"""apply_edits, the momentum block, the edit budget, the rejected buffer, path safety."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trm_assets.domain.edit_schema import Edit
from trm_assets.domain.edits import (
    MOMENTUM_BEGIN,
    MOMENTUM_END,
    EditBudgetSchedule,
    UnsafeSkillPathError,
    apply_edits,
    edit_budget_at,
    edit_budget_end,
    momentum_inner,
    protected_span,
    rejected_entries,
    replace_momentum,
    resolve_skill_file,
    section_span,
)
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.gate import Verdict

SKILL = f"""# Counting

## Strategy
- Answer quickly.
- Count every clip.

## Pitfalls
- Trust the first caption.

```
# not a heading
```

## Momentum
{MOMENTUM_BEGIN}
- Answer quickly.
## Strategy
- Keep counting nouns.
{MOMENTUM_END}
"""


def test_replace_delete_add() -> None:
    edits = [
        Edit(
            op="replace",
            section="strategy",
            anchor="- Answer quickly.",
            text="- Answer after checking every clip.",
        ),
        Edit(op="delete", section="Pitfalls", anchor="- Trust the first caption."),
        Edit(op="add", section="Strategy", anchor="- Count every clip.", text="- Read subtitles."),
        Edit(op="add", section="Strategy", text="- Last line."),
        Edit(op="add", section="Verification", text="- Re-check the count."),
    ]
    r = apply_edits(SKILL, edits, budget=5)
    assert [x.status for x in r.results] == ["applied"] * 5
    assert (
        "- Answer after checking every clip.\n- Count every clip.\n- Read subtitles.\n"
        "- Last line.\n\n## Pitfalls\n\n```" in r.text
    )
    assert "Trust the first caption" not in r.text
    assert r.text.endswith("## Verification\n- Re-check the count.\n")
    assert momentum_inner(r.text) == momentum_inner(SKILL)
    assert r.n_applied == 5 and r.changed


def test_statuses() -> None:
    edits = [
        Edit(op="replace", section="Nope", anchor="x", text="y"),
        Edit(op="delete", section="Strategy", anchor="- Not there."),
        Edit(op="replace", section=None, anchor="- Keep counting nouns.", text="- hacked"),
        Edit(op="replace", section=None, anchor="- Answer quickly.", text="- changed"),
        Edit(op="replace", section="Strategy", anchor="- Count every clip.", text="- Count."),
        Edit(op="delete", section="Strategy", anchor="- Count every clip."),
        Edit(op="add", section="Strategy", text=f"{MOMENTUM_END}\nsneaky"),
        Edit(op="replace", section="Strategy", anchor="- ", text="-- "),
        Edit(op="add", section="Strategy", text="- over"),
    ]
    r = apply_edits(SKILL, edits, budget=8)
    assert [x.status for x in r.results] == [
        "not_found",
        "not_found",
        "conflict",
        "applied",
        "applied",
        "conflict",
        "conflict",
        "conflict",
        "over_budget",
    ]
    assert "inside the protected" in r.results[2].detail
    assert "earlier edit" in r.results[5].detail
    assert "ambiguous" in r.results[7].detail
    # the whole-document replace hit only the copy outside the momentum block
    assert "- changed" in r.text and momentum_inner(r.text) == momentum_inner(SKILL)
    assert r.applied == (edits[3], edits[4])
    with pytest.raises(ValueError):
        apply_edits(SKILL, edits, budget=-1)


def test_add_anchor_on_last_line_and_empty_doc() -> None:
    r = apply_edits("## A\n- x", [Edit(op="add", section="A", anchor="- x", text="- y")], budget=1)
    assert r.text == "## A\n- x\n- y\n"
    r = apply_edits("", [Edit(op="add", text="- first")], budget=1)
    assert r.text == "- first\n"
    r = apply_edits("", [Edit(op="add", section="New", text="- z")], budget=1)
    assert r.text == "## New\n- z\n"
    r = apply_edits(
        "## A\n- x\n", [Edit(op="add", section="A", anchor="- q", text="- y")], budget=1
    )
    assert r.results[0].status == "not_found"


def test_insertion_inside_block_is_a_conflict() -> None:
    text = f"## A\n{MOMENTUM_BEGIN}\nkeep line\n{MOMENTUM_END}\n"
    r = apply_edits(text, [Edit(op="add", section=None, anchor="keep", text="x")], budget=1)
    assert r.results[0].status == "conflict" and r.text == text


def test_corrupt_momentum_block_raises() -> None:
    for bad in (
        f"{MOMENTUM_BEGIN}\nx\n",
        f"x\n{MOMENTUM_END}\n",
        f"{MOMENTUM_END}\n{MOMENTUM_BEGIN}\n",
        f"{MOMENTUM_BEGIN}\n{MOMENTUM_END}\n{MOMENTUM_BEGIN}\n{MOMENTUM_END}\n",
    ):
        with pytest.raises(DataFormatError, match="momentum"):
            apply_edits(bad, [], budget=1)


def test_momentum_helpers() -> None:
    assert momentum_inner("no block") is None and protected_span("x") is None
    assert momentum_inner(SKILL) == "- Answer quickly.\n## Strategy\n- Keep counting nouns.\n"
    new = replace_momentum(SKILL, "- Prefer subtitles.")
    assert momentum_inner(new) == "- Prefer subtitles.\n"
    assert new.startswith(SKILL.split(MOMENTUM_BEGIN)[0])
    added = replace_momentum("# S\nbody", "- g\n")
    assert added == f"# S\nbody\n\n{MOMENTUM_BEGIN}\n- g\n{MOMENTUM_END}\n"
    assert replace_momentum("", "") == f"{MOMENTUM_BEGIN}\n{MOMENTUM_END}\n"
    with pytest.raises(ValueError):
        replace_momentum(SKILL, MOMENTUM_END)
    assert section_span(SKILL, "missing") is None
    assert section_span(SKILL, "not a heading") is None  # inside a code fence


ANCHORS = [
    "- Answer quickly.",
    "- Keep counting nouns.",
    "## Strategy",
    "Count",
    "\n",
    MOMENTUM_BEGIN,
    "- ",
    "Pitfalls",
    "clip",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.builds(
            Edit,
            op=st.sampled_from(["add", "replace", "delete"]),
            section=st.sampled_from([None, "Strategy", "Momentum", "Pitfalls", "New", "strategy"]),
            anchor=st.sampled_from(ANCHORS),
            text=st.sampled_from(["- a", "line\nline2", MOMENTUM_END, "## Momentum\n- b", "x"]),
        ),
        max_size=6,
    ),
    st.integers(0, 6),
)
def test_apply_edits_never_touches_the_protected_block(edits: list[Edit], budget: int) -> None:
    r = apply_edits(SKILL, edits, budget=budget)
    assert momentum_inner(r.text) == momentum_inner(SKILL)
    assert len(r.results) == len(edits)
    assert all(x.status == "over_budget" for x in r.results[budget:])


def test_edit_budget_schedule() -> None:
    s = EditBudgetSchedule(start=6, end=2, epochs=3, steps_per_epoch=4)
    values = [edit_budget_at(e, k, s) for e in range(3) for k in range(4)]
    assert values[0] == 6 and values[-1] == 2
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert edit_budget_end(s) == 2
    one = EditBudgetSchedule(start=3, end=3, epochs=1, steps_per_epoch=1)
    assert edit_budget_at(0, 0, one) == 3
    with pytest.raises(ValueError):
        edit_budget_at(3, 0, s)
    with pytest.raises(ValueError):
        EditBudgetSchedule(start=1, end=2, epochs=1, steps_per_epoch=1)
    with pytest.raises(ValueError):
        EditBudgetSchedule(start=2, end=1, epochs=0, steps_per_epoch=1)


def test_rejected_entries_only_applied_and_tagged() -> None:
    edits = [
        Edit(op="delete", section="Strategy", anchor="- Count every clip.", rationale="r"),
        Edit(op="delete", section="Strategy", anchor="- Missing."),
        Edit(op="add", section="Strategy", text="- extra"),
    ]
    report = apply_edits(SKILL, edits, budget=1)
    harm = rejected_entries(report, Verdict.REJECT_HARM, skill_file="counting.md", wins=1, losses=9)
    assert (
        len(harm) == 1 and harm[0].tag == "verified_harmful" and harm[0].anchor == edits[0].anchor
    )
    assert harm[0].verdict == "REJECT_HARM" and harm[0].losses == 9
    for v in (Verdict.REJECT_DIR, Verdict.REJECT_FUTILE, Verdict.REJECT_BUDGET):
        assert rejected_entries(report, v, skill_file="c.md")[0].tag == "not_verified"
    for v in (Verdict.ACCEPT, Verdict.INFRA, Verdict.CONTINUE):
        with pytest.raises(ValueError):
            rejected_entries(report, v, skill_file="c.md")


def test_resolve_skill_file(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    (tmp_path / "secret.md").write_text("x")
    assert (
        resolve_skill_file(skills, "counting-problem.md")
        == (skills / "counting-problem.md").resolve()
    )
    for bad in (
        "/etc/passwd.md",
        "../secret.md",
        "..",
        "a/b.md",
        "a\\b.md",
        "C:x.md",
        "",
        ".hidden.md",
        "x.txt",
        "nul\x00.md",
        "\\\\server\\share\\x.md",
    ):
        with pytest.raises(UnsafeSkillPathError):
            resolve_skill_file(skills, bad)
    os.symlink(tmp_path / "secret.md", skills / "link.md")
    with pytest.raises(UnsafeSkillPathError, match="symbolic link"):
        resolve_skill_file(skills, "link.md")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=20))
def test_path_safety_on_hostile_names(name: str) -> None:
    base = Path("/tmp/trm-skills-hypothesis")
    try:
        path = resolve_skill_file(base, name)
    except UnsafeSkillPathError:
        return
    assert path.parent == base.resolve() and path.name == name and name.endswith(".md")
