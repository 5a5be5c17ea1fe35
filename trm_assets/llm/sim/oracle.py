"""The oracle: noise-free expected accuracy of any skill set on any pool, computed analytically.

For question q with hidden cue k_q and difficulty d_q, given the instruction texts the agent reads
(its task-type skill, ``default-strategy.md``, the system prompt and the tool descriptions)::

    p_q = g + (1 − g) · σ(a − s·d_q + b·[texts express k_q] − c·[texts hold a harmful directive]
                          − λ·(words beyond the seed prompt set) / 100)

perturbed by the texts' own idiosyncrasy when ``text_flip_rate > 0`` (:mod:`.decoding`). The
simulated agent draws its answers from exactly this probability (:mod:`.agent`: the same
:func:`question_probability`), so the mean over a pool is the expectation of the observed accuracy
at any temperature: above 0 over the sample index, at 0 over the questions' fixed draws. The
**best** achievable accuracy sets every cue indicator to 1 and every harm indicator to 0, at no
more than the seed prompts' length, in expectation over rewordings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict, Unpack

from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.llm.sim.decoding import extra_words, instruction_parts, text_probability
from trm_assets.llm.sim.draws import sigmoid
from trm_assets.llm.sim.world import SimWorld
from trm_assets.llm.sim_config import SimConfig

MOMENTUM_BEGIN = "<!-- momentum:begin -->"
MOMENTUM_END = "<!-- momentum:end -->"
OPTIMAL_SECTION = "## Strategy"
SkillMode = Literal["task", "all", "none"]


class Instructions(TypedDict, total=False):
    """What the agent reads besides its skills (the keywords of :func:`active_texts`, whose
    defaults apply to any left out)."""

    system_prompt: str
    tool_descriptions: Sequence[str]
    skill_mode: SkillMode


def probability_correct(
    difficulty: float, *, cue: bool, harm: bool, config: SimConfig, extra: int = 0
) -> float:
    """P(correct) of one question given whether its cue is expressed and harm present, and how
    many words beyond the seed prompt set it reads (``extra``, costing ``length_cost`` each 100)."""
    logit = (
        config.ability
        - config.difficulty_scale * difficulty
        + (config.cue_strength if cue else 0.0)
        - (config.harm_strength if harm else 0.0)
    )
    if extra > 0 and config.length_cost > 0:
        logit -= config.length_cost * extra / 100.0
    return config.guess + (1.0 - config.guess) * sigmoid(logit)


def active_texts(
    task_type: str,
    skills: Mapping[str, str],
    *,
    system_prompt: str = "",
    tool_descriptions: Sequence[str] = (),
    skill_mode: SkillMode = "task",
) -> list[str]:
    """The instruction texts an agent reads for a question of ``task_type``.

    ``skill_mode`` mirrors the AgentLoop's: ``"task"`` = the task type's skill and
    ``default-strategy.md``; ``"all"`` = every skill; ``"none"`` = no skill.
    """
    if skill_mode == "task":
        texts = [skills.get(skill_file_name(task_type), ""), skills.get(DEFAULT_SKILL_FILE, "")]
    elif skill_mode == "all":
        texts = [skills[k] for k in sorted(skills)]
    elif skill_mode == "none":
        texts = []
    else:
        raise ValueError(f"skill_mode must be 'task', 'all' or 'none', got {skill_mode!r}")
    return [t for t in (*texts, system_prompt, *tool_descriptions) if t]


def question_probability(
    world: SimWorld,
    question_id: str,
    texts: Iterable[str],
    config: SimConfig,
) -> float:
    """Expected accuracy of one question given the instruction texts the agent reads: the
    separate pieces (skills, system prompt, tool descriptions) or the rendered request (system
    message with skill blocks, tool descriptions) give the same value."""
    q = world.questions[question_id]
    texts = list(texts)
    cue = world.expresses_cue(q.task_type, q.cue, texts)
    harm = world.harm_present(q.task_type, texts)
    if config.length_cost <= 0 and config.text_flip_rate <= 0:  # issue 4's world
        return probability_correct(q.difficulty, cue=cue, harm=harm, config=config)
    parts = instruction_parts(texts)
    extra = extra_words(q.task_type, parts) if config.length_cost > 0 else 0
    p = probability_correct(q.difficulty, cue=cue, harm=harm, config=config, extra=extra)
    return text_probability(config, question_id, parts, p)


def expected_accuracy(
    world: SimWorld,
    question_ids: Iterable[str],
    skills: Mapping[str, str],
    config: SimConfig,
    **instructions: Unpack[Instructions],
) -> float:
    """Mean expected accuracy of ``skills`` (file name → text) over ``question_ids``."""
    probs = expected_by_question(world, question_ids, skills, config, **instructions)
    return sum(probs.values()) / len(probs) if probs else float("nan")


def expected_by_question(
    world: SimWorld,
    question_ids: Iterable[str],
    skills: Mapping[str, str],
    config: SimConfig,
    **instructions: Unpack[Instructions],
) -> dict[str, float]:
    """Per-question expected accuracy, keyed by question id (sorted)."""
    out: dict[str, float] = {}
    for qid in sorted(set(question_ids)):
        q = world.questions.get(qid)
        if q is None:
            raise KeyError(f"question {qid!r} is not in the simulated world ({world.source})")
        texts = active_texts(q.task_type, skills, **instructions)
        out[qid] = question_probability(world, qid, texts, config)
    return out


def best_expected_accuracy(
    world: SimWorld, question_ids: Iterable[str], config: SimConfig
) -> float:
    """The best achievable expected accuracy: every cue expressed, no harmful directive, no word
    beyond the seed prompt set; with ``text_flip_rate`` the expectation over rewordings."""
    qids = sorted(set(question_ids))
    if not qids:
        return float("nan")
    total = sum(
        probability_correct(world.questions[q].difficulty, cue=True, harm=False, config=config)
        for q in qids
    )
    return total / len(qids)


def optimal_skills(world: SimWorld, skills: Mapping[str, str]) -> dict[str, str]:
    """``skills`` with, in each task-type skill, one bullet per missing cue of that task type.

    The bullets go at the end of the ``## Strategy`` section (created if absent) so the momentum
    block stays intact. Harmful directives are not removed (seed skills contain none).
    """
    out = dict(skills)
    for tt in world.task_types:
        task = world.truth.task_types[tt]
        name = task.skill_file
        text = out.get(name, f"# {tt}\n\n{OPTIMAL_SECTION}\n")
        have = world.cues_expressed(tt, [text])
        bullets = [
            f"- {c.phrasings[0][:1].upper()}{c.phrasings[0][1:]}."
            for c in task.cues
            if c.cue_id not in have
        ]
        if bullets:
            text = _append_to_section(text, OPTIMAL_SECTION, bullets)
        out[name] = text
    return out


def _append_to_section(text: str, heading: str, lines: list[str]) -> str:
    rows = text.splitlines()
    try:
        start = next(i for i, r in enumerate(rows) if r.strip().lower() == heading.lower())
    except StopIteration:
        return text.rstrip("\n") + f"\n\n{heading}\n" + "\n".join(lines) + "\n"
    end = start + 1
    while end < len(rows) and not rows[end].startswith("#") and rows[end].strip() != MOMENTUM_BEGIN:
        end += 1
    while end > start + 1 and not rows[end - 1].strip():
        end -= 1
    rows[end:end] = lines
    return "\n".join(rows) + ("\n" if text.endswith("\n") else "")


def load_skills(directory: str | Path) -> dict[str, str]:
    """All ``*.md`` skill files of a directory, keyed by file name (sorted)."""
    d = Path(directory)
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(d.glob("*.md"))}


@dataclass(frozen=True)
class OracleRow:
    """Expected accuracy of one group of questions (a task type, or ``"all"``)."""

    group: str
    n: int
    expected: float
    best: float
    cues_expressed: int
    cues_total: int


def oracle_table(
    world: SimWorld,
    question_ids: Iterable[str],
    skills: Mapping[str, str],
    config: SimConfig,
    **instructions: Unpack[Instructions],
) -> list[OracleRow]:
    """Per task type (sorted) then ``"all"``: n, expected accuracy of ``skills``, best possible."""
    probs = expected_by_question(world, question_ids, skills, config, **instructions)
    rows: list[OracleRow] = []
    for tt in world.task_types:
        qids = [q for q in probs if world.questions[q].task_type == tt]
        if not qids:
            continue
        texts = active_texts(tt, skills, **instructions)
        rows.append(
            OracleRow(
                group=tt,
                n=len(qids),
                expected=sum(probs[q] for q in qids) / len(qids),
                best=best_expected_accuracy(world, qids, config),
                cues_expressed=len(world.cues_expressed(tt, texts)),
                cues_total=len(world.truth.task_types[tt].cues),
            )
        )
    all_q = list(probs)
    rows.append(
        OracleRow(
            group="all",
            n=len(all_q),
            expected=sum(probs.values()) / len(all_q) if all_q else float("nan"),
            best=best_expected_accuracy(world, all_q, config),
            cues_expressed=sum(r.cues_expressed for r in rows),
            cues_total=sum(r.cues_total for r in rows),
        )
    )
    return rows
