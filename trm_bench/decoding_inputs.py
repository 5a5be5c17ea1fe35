"""The inputs of ``trm bench decoding``: the questions (never the test pool), text A and text B.

Text B is text A with one neutral line appended to every task type's skill, or the user's own
skill files (``--variant-skills``); only questions whose task type reads a changed text are
probed, and with the simulated world the variant must express the same cues and harmful
directives as A (a neutral change, or the probe would measure an effect)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trm_assets.agent.messages import (
    AgentPrompts,
    SkillMode,
    active_skill_files,
    load_agent_prompts,
)
from trm_assets.domain.errors import TrmError
from trm_assets.domain.pools import Pools
from trm_assets.domain.question import DEFAULT_SKILL_FILE, Question
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.data.dataset import Dataset, load_dataset
from trm_assets.harness.data.rng import rng_for
from trm_assets.harness.storage.pools import build_pools, load_pools
from trm_assets.llm.factory import SimOracle
from trm_assets.llm.providers import Providers
from trm_assets.llm.sim.oracle import load_skills

#: Text B's change: one line restating the default strategy (no cue, no harmful directive of
#: the simulated catalogue: checked on every simulated run).
DEFAULT_QUESTIONS: Final = 300
VARIANT_LINE: Final = "- Read all four options before you choose one."


class ProbeError(TrmError, ValueError):
    """Inputs the probe cannot measure with (too few questions, a variant that is not one)."""


@dataclass(frozen=True)
class ProbeInputs:
    """What every temperature's probe rolls out: the questions, both texts, the agent."""

    cfg: RunConfig
    dataset: Dataset
    questions: tuple[Question, ...]
    skills_a: Mapping[str, str]
    skills_b: Mapping[str, str]
    prompts: AgentPrompts
    variant: str  # what text B is, for the report
    task_types: tuple[str, ...]  # the task types whose questions read a changed text
    draw_seed: int = 0  # in the run ids: another value draws every rollout anew


def neutral_variant(skills: Mapping[str, str], line: str = VARIANT_LINE) -> dict[str, str]:
    """Text B: every task type's skill file with ``line`` appended (``default-strategy.md``,
    which every question reads, unchanged: a gate edits one task type's file)."""
    return {
        name: text if name == DEFAULT_SKILL_FILE else text.rstrip("\n") + "\n" + line + "\n"
        for name, text in skills.items()
    }


def _read_skills(directory: Path) -> dict[str, str]:
    skills = load_skills(directory)
    if not skills:
        raise ProbeError(f"{directory}: no skill file (*.md)")
    return skills


def skill_texts(skills: Mapping[str, str], task_type: str, skill_mode: SkillMode) -> list[str]:
    """The skill texts a question of ``task_type`` reads."""
    return [skills[f] for f in active_skill_files(task_type, skills, skill_mode)]


def changed_task_types(
    skills_a: Mapping[str, str],
    skills_b: Mapping[str, str],
    task_types: Sequence[str],
    skill_mode: SkillMode,
) -> tuple[str, ...]:
    """The task types whose questions read a different skill text under B than under A."""
    return tuple(
        t
        for t in task_types
        if skill_texts(skills_a, t, skill_mode) != skill_texts(skills_b, t, skill_mode)
    )


def probe_questions(
    cfg: RunConfig, dataset: Dataset, n: int | None, task_types: Sequence[str], pools: Pools
) -> tuple[Question, ...]:
    """``n`` questions of ``task_types`` in the validation and diagnosis pools (never the test
    pool), in a seeded order (``rng_for(seed, "decoding-probe")``); None: up to
    :data:`DEFAULT_QUESTIONS`, as many as there are."""
    by_id = dataset.by_id()
    wanted = set(task_types)
    ids = sorted(q for q in {*pools.validation, *pools.diagnosis} if by_id[q].task_type in wanted)
    if n is None:
        n = min(DEFAULT_QUESTIONS, len(ids))
    if n > len(ids):
        raise ProbeError(
            f"--questions {n}: the split has {len(ids)} validation and diagnosis questions whose "
            "text the variant changes (the test pool is never probed); ask for at most "
            f"{len(ids)}"
        )
    order = rng_for(cfg.seed, "decoding-probe").permutation(len(ids))
    return tuple(by_id[ids[int(i)]] for i in order[:n])


def load_inputs(
    cfg: RunConfig,
    n: int | None,
    prompts_dir: Path,
    variant_dir: Path | None = None,
    *,
    workspace: Path | None = None,
    draw_seed: int = 0,
) -> ProbeInputs:
    """The probe's inputs. ``workspace``: take the pools from its ``pools.json`` (read only),
    so its test pool stays unprobed whatever the config's split says."""
    dataset = load_dataset(cfg)
    skills_a = _read_skills(prompts_dir / "skills")
    if variant_dir is None:
        skills_b, variant = neutral_variant(skills_a), f"one line appended ({VARIANT_LINE!r})"
    else:
        given = _read_skills(variant_dir)
        unknown = sorted(set(given) - set(skills_a))
        if unknown:
            raise ProbeError(
                f"{variant_dir}: {', '.join(unknown)} not in the prompt set's skills "
                f"({prompts_dir / 'skills'}): a variant replaces skill files, it adds none"
            )
        skills_b, variant = {**skills_a, **given}, str(variant_dir)
    changed = changed_task_types(skills_a, skills_b, dataset.task_types, cfg.skill_mode)
    if not changed:
        raise ProbeError(
            f"the variant changes no skill text a question reads (skill_mode: {cfg.skill_mode}): "
            "nothing to compare"
        )
    if workspace is None:
        pools = build_pools(cfg, dataset.questions)
    elif not (workspace / "manifest.json").is_file():
        raise ProbeError(f"{workspace}: not a workspace (no manifest.json)")
    elif not (workspace / "pools.json").is_file():
        raise ProbeError(
            f"{workspace}: no pools.json yet (a workspace's pools are frozen by its first `trm "
            "train` or `trm run`); before that, leave out --workspace: the same config draws the "
            "same pools"
        )
    else:
        pools = load_pools(workspace / "pools.json", dataset.questions)
    return ProbeInputs(
        cfg=cfg,
        dataset=dataset,
        questions=probe_questions(cfg, dataset, n, changed, pools),
        skills_a=skills_a,
        skills_b=skills_b,
        prompts=load_agent_prompts(prompts_dir),
        variant=variant,
        task_types=changed,
        draw_seed=draw_seed,
    )


def check_variant_is_neutral(inputs: ProbeInputs, providers: Providers) -> None:
    """With the simulated world, text B must express the same cues and harmful directives as A
    for every task type it changes (a cue added or removed is an edit with an effect)."""
    if not isinstance(providers.oracle, SimOracle):
        return
    world, mode = providers.oracle.world, inputs.cfg.skill_mode
    for task_type in inputs.task_types:
        a, b = (skill_texts(s, task_type, mode) for s in (inputs.skills_a, inputs.skills_b))
        if world.cues_expressed(task_type, a) != world.cues_expressed(
            task_type, b
        ) or world.harm_present(task_type, a) != world.harm_present(task_type, b):
            raise ProbeError(
                f"the variant adds or removes a cue or a harmful directive of the simulated "
                f"world for {task_type!r}: the probe needs a neutral change"
            )
