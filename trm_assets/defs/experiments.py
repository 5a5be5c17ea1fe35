"""Experiments: one workspace + one config each, many in one Dagster instance.

An experiment's assets, jobs, partitions and sensor are built under its own name (asset keys
``<name>/<asset>``, jobs ``<name>__<job>``; ``docs/decision-dagster-experiments.md``), so the
catalog, plots and lineage of one experiment never show another's. Which experiments the code
location serves is the instance's registry, ``$DAGSTER_HOME/experiments.yaml``, written by
``trm train`` / ``trm run`` (through :func:`trm_assets.defs.driver.drive`) and ``trm sweep``;
``TRM_DAGSTER_WORKSPACE`` / ``TRM_DAGSTER_CONFIG`` add one more without writing it.

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

import fcntl
import hashlib
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trm_assets.domain.errors import TrmError, describe_validation_error
from trm_assets.harness.data.config import RunConfig, load_config
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.harness.loop.observer import LoopObserver
from trm_assets.harness.storage.atomic import atomic_write_text
from trm_assets.llm.providers import Providers, ProviderSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = "data/configs/default.yaml"
DEFAULT_WORKSPACE = "workspaces/default"
REGISTRY_FILE = "experiments.yaml"
EXPERIMENT_TAG = "trm/experiment"  # on every run of an experiment's jobs (the queue's limit key)
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")


class ExperimentError(TrmError):
    """An experiment name, registry entry or registry file that cannot be used."""


def experiment_name_for(workspace: str | Path) -> str:
    """A Dagster-safe name from a workspace directory: ``workspaces/sweep-1.a`` → ``sweep_1_a``."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", Path(workspace).resolve().name).strip("_") or "ws"
    if not stem[0].isalpha():
        stem = f"ws_{stem}"
    return stem[:48]


def check_experiment_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ExperimentError(
            f"experiment name {name!r}: expected a letter followed by letters, digits or '_' "
            "(at most 48; it prefixes asset keys and job names)"
        )
    return name


class Experiment(BaseModel):
    """One experiment: its workspace, its config (empty: the config ``trm init`` stored in the
    workspace, else the default simulated config) and config overrides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""  # empty: derived from the workspace directory
    workspace: str = DEFAULT_WORKSPACE
    config_path: str = ""
    overrides: tuple[str, ...] = Field(default_factory=tuple)

    @model_validator(mode="before")
    @classmethod
    def _fill_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("name"):
            data = {**data, "name": experiment_name_for(data.get("workspace", DEFAULT_WORKSPACE))}
        if isinstance(data, dict) and isinstance(data.get("overrides"), list):
            data = {**data, "overrides": tuple(data["overrides"])}
        return data

    @model_validator(mode="after")
    def _check_name(self) -> "Experiment":
        check_experiment_name(self.name)
        return self

    def workspace_dir(self) -> Path:
        return Path(self.workspace)

    def resolved_config_path(self) -> str:
        if self.config_path:
            return self.config_path
        stored = self.workspace_dir() / "config.yaml"
        return str(stored) if stored.is_file() else DEFAULT_CONFIG

    def run_config(self) -> RunConfig:
        return load_config(self.resolved_config_path(), self.overrides)

    def absolute(self) -> "Experiment":
        """The same experiment with absolute paths (registry entries do not depend on a cwd)."""
        cfg = str(Path(self.config_path).resolve()) if self.config_path else ""
        return self.model_copy(
            update={"workspace": str(Path(self.workspace).resolve()), "config_path": cfg}
        )

    @contextmanager
    def open(
        self,
        build_providers: Callable[[ProviderSpec], Providers],
        observers: Sequence[LoopObserver] = (),
    ) -> Iterator[LoopContext]:
        """A loop context for one unit of work (closes the run log afterwards); the providers
        come from ``build_providers`` (an LLM resource's ``providers``)."""
        cfg = self.run_config()
        with loop_context(self.workspace_dir(), cfg, build_providers(cfg.provider_spec())) as ctx:
            ctx.observers = (*ctx.observers, *observers)
            yield ctx


# ------------------------------------------------------------------------------------------------
# The registry of an instance


def registry_path(dagster_home: str | Path) -> Path:
    return Path(dagster_home) / REGISTRY_FILE


def load_registry(
    dagster_home: str | Path | None,
    *,
    skip_invalid: bool = False,
    skipped: list[str] | None = None,
) -> dict[str, Experiment]:
    """``{name: experiment}`` of ``$DAGSTER_HOME/experiments.yaml`` (empty when absent). An
    invalid entry is an error, or with ``skip_invalid`` (the code location: one broken entry
    must not hide the others) a warning naming it, and left out. :func:`register` reads
    strictly: it writes back every entry it read."""
    if dagster_home is None:
        return {}
    path = registry_path(dagster_home)
    if not path.is_file():
        return {}
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ExperimentError(f"{path}: not valid YAML ({e}); fix or delete the file") from None
    entries = raw.get("experiments", {}) if isinstance(raw, dict) else None
    if not isinstance(entries, dict):
        raise ExperimentError(f"{path}: expected a mapping 'experiments: {{name: {{...}}}}'")
    out: dict[str, Experiment] = {}
    for name, entry in entries.items():
        try:
            out[str(name)] = Experiment.model_validate({**(entry or {}), "name": str(name)})
        except (ValidationError, ExperimentError) as e:
            detail = (
                "; ".join(describe_validation_error(e)) if isinstance(e, ValidationError) else e
            )
            problem = f"{path}: experiment {name!r}: {detail}"
            if not skip_invalid:
                raise ExperimentError(problem) from None
            warnings.warn(f"{problem}; not served", stacklevel=2)
            if skipped is not None:
                skipped.append(str(name))
    return out


def register(
    dagster_home: str | Path, experiment: Experiment, *, rename_on_conflict: bool = False
) -> Experiment:
    """Add ``experiment`` (absolute paths) to the registry and return it as registered.

    A workspace already registered keeps its registered name (its config entry is updated). A
    name taken by another workspace is an error — or, with ``rename_on_conflict`` (what
    ``trm train`` uses for names derived from the directory), the name gets a suffix derived from
    the workspace path, so the same workspace always gets the same name.
    """
    exp = experiment.absolute()
    known = load_registry(dagster_home)
    registered, changed = _resolve(dagster_home, known, exp, rename_on_conflict)
    if not changed:  # registered as is: nothing to write, no lock (a read-only home works)
        return registered
    with _registry_lock(dagster_home):  # read, change, write: one process at a time
        known = load_registry(dagster_home)
        registered, changed = _resolve(dagster_home, known, exp, rename_on_conflict)
        if changed:
            _write_registry(dagster_home, {**known, registered.name: registered})
        return registered


#: How long a registration waits for another one to finish before it names the lock.
REGISTRY_LOCK_WAIT_S = 30.0


@contextmanager
def _registry_lock(dagster_home: str | Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``<home>/.experiments.lock`` (never replaced; released by the
    kernel when its holder dies): concurrent `trm sweep` / `trm train` registrations lost
    entries, each writing back what it had read."""
    home = Path(dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    path = home / ".experiments.lock"
    with open(path, "a+") as fh:
        deadline = time.monotonic() + REGISTRY_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ExperimentError(
                        f"{path}: another process has been registering an experiment for "
                        f"{REGISTRY_LOCK_WAIT_S:.0f} s (a stopped `trm train` / `trm sweep`?); "
                        "retry when it is done"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _resolve(
    dagster_home: str | Path, known: dict[str, Experiment], exp: Experiment, rename: bool
) -> tuple[Experiment, bool]:
    """(the experiment as it is registered, whether the registry must change for it)."""
    same_ws = [e for e in known.values() if Path(e.workspace) == Path(exp.workspace)]
    if same_ws and rename:
        exp = exp.model_copy(update={"name": same_ws[0].name})
    old = known.get(exp.name)
    if old is not None and Path(old.workspace) != Path(exp.workspace):
        if not rename:
            raise ExperimentError(
                f"{registry_path(dagster_home)}: experiment {exp.name!r} is already workspace "
                f"{old.workspace}, not {exp.workspace}; give this workspace another name (a "
                "different directory name, or `trm sweep --name`)"
            )
        digest = hashlib.sha256(exp.workspace.encode()).hexdigest()[:6]
        exp = exp.model_copy(update={"name": f"{exp.name[:41]}_{digest}"})
        old = known.get(exp.name)
    return exp, old != exp


def _write_registry(dagster_home: str | Path, known: dict[str, Experiment]) -> None:
    body = {
        "experiments": {
            n: {
                "workspace": e.workspace,
                "config_path": e.config_path,
                "overrides": list(e.overrides),
            }
            for n, e in sorted(known.items())
        }
    }
    path = registry_path(dagster_home)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Experiments served by the trm_assets code location (written by trm train/sweep)\n"
    atomic_write_text(path, header + yaml.safe_dump(body, sort_keys=False))


def code_location_experiments(environ: dict[str, str] | None = None) -> list[Experiment]:
    """The experiments the code location serves: the registry of ``$DAGSTER_HOME``, plus the one
    named by ``TRM_DAGSTER_WORKSPACE`` (and ``TRM_DAGSTER_CONFIG``); the default workspace when
    there is none. Sorted by name."""
    env = os.environ if environ is None else environ
    skipped: list[str] = []
    found = dict(load_registry(env.get("DAGSTER_HOME") or None, skip_invalid=True, skipped=skipped))
    ws = env.get("TRM_DAGSTER_WORKSPACE")
    if ws:
        extra = Experiment(workspace=ws, config_path=env.get("TRM_DAGSTER_CONFIG", "")).absolute()
        old = found.get(extra.name)
        if old is not None and Path(old.workspace) != Path(extra.workspace):
            warnings.warn(
                f"TRM_DAGSTER_WORKSPACE={ws}: the name {extra.name!r} is taken by "
                f"{old.workspace} in the registry; serving the registry's",
                stacklevel=2,
            )
        else:
            found[extra.name] = extra
    if not found and not skipped:  # a registry of broken entries does not become `default`
        default = Experiment(
            name="default",
            workspace=str(PROJECT_ROOT / DEFAULT_WORKSPACE),
            config_path=env.get("TRM_DAGSTER_CONFIG", ""),
        )
        found[default.name] = default
    return [found[n] for n in sorted(found)]
