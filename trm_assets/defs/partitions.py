"""Partitions of one experiment: epochs and steps (dynamic, added as training advances, named
``<experiment>__epochs`` / ``<experiment>__steps`` so experiments never share partition keys) and
task types (static, read from the experiment's data: nothing hard-codes their count).

Keys follow the run ids in the run log: epoch ``e0``, step ``s1`` → run ``train_e0_s1``.
"""

from dataclasses import dataclass
from functools import lru_cache

import dagster as dg

from trm_assets.harness.data.questions import load_questions, task_types_of


@dataclass(frozen=True)
class ExperimentPartitions:
    epochs: dg.DynamicPartitionsDefinition
    steps: dg.DynamicPartitionsDefinition
    epoch_steps: dg.MultiPartitionsDefinition
    task_types: dg.StaticPartitionsDefinition

    @property
    def epochs_name(self) -> str:
        return str(self.epochs.name)

    @property
    def steps_name(self) -> str:
        return str(self.steps.name)

    def task_type_keys(self) -> list[str]:
        return list(self.task_types.get_partition_keys())


@lru_cache(maxsize=32)
def task_types_in(questions: str) -> tuple[str, ...]:
    """The task types of a question file (cached: experiments of a sweep share their data)."""
    return tuple(task_types_of(load_questions(questions)))


def experiment_partitions(experiment: str, task_types: tuple[str, ...]) -> ExperimentPartitions:
    epochs = dg.DynamicPartitionsDefinition(name=f"{experiment}__epochs")
    steps = dg.DynamicPartitionsDefinition(name=f"{experiment}__steps")
    return ExperimentPartitions(
        epochs=epochs,
        steps=steps,
        epoch_steps=dg.MultiPartitionsDefinition({"epoch": epochs, "step": steps}),
        task_types=dg.StaticPartitionsDefinition(list(task_types)),
    )


def epoch_key(epoch: int) -> str:
    return f"e{epoch}"


def step_key(step: int) -> str:
    return f"s{step}"


def epoch_step_key(epoch: int, step: int) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"epoch": epoch_key(epoch), "step": step_key(step)})


def parse_key(key: str, prefix: str) -> int:
    """``"e3"`` → 3; anything else is a clear error (partition keys are user-visible)."""
    if not key.startswith(prefix) or not key[len(prefix) :].isdigit():
        raise ValueError(f"partition key {key!r}: expected {prefix}<number>, e.g. {prefix}0")
    return int(key[len(prefix) :])


def epoch_step_of(key: str | dg.MultiPartitionKey) -> tuple[int, int]:
    mk = key if isinstance(key, dg.MultiPartitionKey) else None
    if mk is None:
        parts = dict(zip(("epoch", "step"), str(key).split("|"), strict=False))
        if set(parts) != {"epoch", "step"}:
            raise ValueError(f"partition key {key!r}: expected 'e<epoch>|s<step>'")
        return parse_key(parts["epoch"], "e"), parse_key(parts["step"], "s")
    dims = mk.keys_by_dimension
    return parse_key(dims["epoch"], "e"), parse_key(dims["step"], "s")


def ensure_partitions(instance: dg.DagsterInstance, name: str, keys: list[str]) -> None:
    """Add the dynamic partition keys that do not exist yet."""
    missing = [k for k in keys if not instance.has_dynamic_partition(name, k)]
    if missing:
        instance.add_dynamic_partitions(name, missing)
