"""The questions and trees a config points at, loaded, validated and cross-checked once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trm_assets.agent.tree import VideoTree, load_trees
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.question import Question
from trm_assets.harness.data.config import RunConfig, check_against_data
from trm_assets.harness.data.questions import load_questions, task_types_of


@dataclass(frozen=True)
class Dataset:
    questions: tuple[Question, ...]
    trees: dict[str, VideoTree]
    task_types: tuple[str, ...]
    questions_ref: str  # the question file path, recorded with every run

    def by_id(self) -> dict[str, Question]:
        return {q.question_id: q for q in self.questions}


def load_dataset(cfg: RunConfig, *, with_trees: bool = True) -> Dataset:
    """Load ``cfg.questions`` (and ``cfg.trees``), check every question has a tree, and apply the
    data-dependent config layer (``val_size ≥ eval_min_per_class × task types``)."""
    questions = tuple(load_questions(cfg.questions))
    trees: dict[str, VideoTree] = {}
    if with_trees:
        tree_dir = Path(cfg.trees)
        if not tree_dir.is_dir():
            raise DataFormatError(cfg.trees, None, "trees", "a directory of <videoID>.json trees")
        trees = load_trees(tree_dir)
        missing = sorted({q.tree_key for q in questions} - set(trees))
        if missing:
            raise DataFormatError(
                cfg.trees,
                None,
                None,
                f"a tree for every video of {cfg.questions}; missing {len(missing)} "
                f"(videoID {missing[:5]})",
            )
    types = tuple(task_types_of(questions))
    check_against_data(cfg, types, len(questions))
    return Dataset(questions, trees, types, str(cfg.questions))
