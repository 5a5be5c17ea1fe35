"""``trm init``: create a workspace whose ``v1`` holds the prompt set (or a seed's texts).

Registered by :mod:`trm_assets.cli` as ``init_cmd``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from trm_assets.cli.support import WORKSPACE_OPTION, fail_on_trm_error

if TYPE_CHECKING:
    from trm_assets.agent.messages import SkillMode


@click.command("init")
@WORKSPACE_OPTION
@click.option(
    "--config", "config_path", required=True, type=click.Path(path_type=Path), help="YAML config."
)
@click.option("--from-seed", "seed_name", default=None, help="Start from this promoted seed.")
@click.option(
    "--seeds-dir",
    default=Path("seeds"),
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where seeds live (shared across workspaces).",
)
@click.option(
    "--prompts-dir",
    default=None,
    type=click.Path(path_type=Path),
    help="Prompt set for a fresh workspace (default: the repository's prompts/).",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a setting.")
@fail_on_trm_error
def init_cmd(
    workspace: Path,
    config_path: Path,
    seed_name: str | None,
    seeds_dir: Path,
    prompts_dir: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Create a workspace: v1 of the skills and prompts stores, a manifest, the config used.

    An existing workspace in DIR is moved aside to DIR.archive-N, but only after every check
    (config, questions file, prompt set or seed) has passed.
    """
    from trm_assets.harness.data.config import config_to_yaml, load_config
    from trm_assets.harness.data.dataset import load_dataset
    from trm_assets.harness.storage.workspace import init_workspace, init_workspace_from_seed

    cfg = load_config(config_path, overrides)
    # the data the workspace will train on (questions, a tree per video, pool sizes that fit),
    # checked before anything is archived: a workspace a later `trm train` refuses is no start
    data = load_dataset(cfg)
    _check_skills_cover(data.task_types, cfg.skill_mode, seed_name, seeds_dir, prompts_dir)
    common = {"config_yaml": config_to_yaml(cfg), "config_fingerprint": cfg.fingerprint()}
    if seed_name is None:
        res = init_workspace(
            workspace, questions_ref=cfg.questions, prompts_dir=prompts_dir, **common
        )
    else:
        res = init_workspace_from_seed(
            workspace, seed_name, seeds_dir=seeds_dir, questions_ref=cfg.questions, **common
        )
    p = res.paths
    if res.archived is not None:
        click.echo(f"archived the previous workspace to {res.archived}")
    n_skills = len(list(p.skills_dir.glob("*.md")))
    n_prompts = sum(1 for f in p.prompts_dir.rglob("*") if f.is_file() and f.name != "_meta.json")
    origin = f"seed {seed_name}" if seed_name else "the prompt set"
    click.echo(
        f"workspace {p.workspace}: skills {p.skills_version} ({n_skills} files), prompts "
        f"{p.prompts_version} ({n_prompts} files) from {origin}; questions {cfg.questions}"
    )


def _check_skills_cover(
    task_types: tuple[str, ...],
    skill_mode: SkillMode,
    seed_name: str | None,
    seeds_dir: Path,
    prompts_dir: Path | None,
) -> None:
    """Every task type of the data has the skill files its mode needs in what becomes ``v1``
    (hostile pass: a type without a seed skill file passed init, and only `trm train` refused
    the workspace). Checked before anything is created or archived."""
    from trm_assets.agent.messages import active_skill_files
    from trm_assets.harness.storage.versions import read_seed
    from trm_assets.harness.storage.workspace import default_prompts_dir, read_prompt_set

    if seed_name is not None:
        skills = read_seed(seeds_dir, seed_name).skills
    else:
        skills = read_prompt_set(prompts_dir or default_prompts_dir())[0]
    for task_type in task_types:
        active_skill_files(task_type, skills, skill_mode)
