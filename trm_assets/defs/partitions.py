"""Partitions: epochs and steps (dynamic, added as training advances) and task types (static,
read from the configured data at load time: nothing hard-codes their count).

Keys follow the run ids in the run log: epoch ``e0``, step ``s1`` → run ``train_e0_s1``.
"""

import dagster as dg

from trm_assets.defs.resources import default_resource
from trm_assets.harness.data.questions import load_questions, task_types_of

EPOCHS = "epochs"
STEPS = "steps"
epochs = dg.DynamicPartitionsDefinition(name=EPOCHS)
steps = dg.DynamicPartitionsDefinition(name=STEPS)
epoch_steps = dg.MultiPartitionsDefinition({"epoch": epochs, "step": steps})


def _task_types() -> list[str]:
    return task_types_of(load_questions(default_resource().run_config().questions))


task_types = dg.StaticPartitionsDefinition(_task_types())


def epoch_key(epoch: int) -> str:
    return f"e{epoch}"


def step_key(step: int) -> str:
    return f"s{step}"


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
