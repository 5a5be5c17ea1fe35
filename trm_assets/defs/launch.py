"""``trm launch`` and ``trm sweep``: runs submitted to the running Dagster webserver (its GraphQL
API, ``dagster_graphql.DagsterGraphQLClient``), so they enter the instance's run queue like a UI
launch: one run per experiment at a time (``trm/experiment`` tag limit in ``dagster.yaml``),
experiments in parallel. Each prints the run ids and their UI URLs.

* ``trm launch --experiment NAME --epoch N`` — the epoch asset's partition ``eN`` (what is left of
  the epoch); ``--job slow_update --epoch N``; ``--finalize``. An epoch past the configured ones is
  refused before anything is added, naming the config key to raise.
* ``trm sweep --name S --config A.yaml [--config B.yaml] --seeds 0,1`` — one experiment per
  (config, seed): a workspace ``<root>/<S>/<config stem>_s<seed>`` created with that seed,
  registered in ``$DAGSTER_HOME/experiments.yaml``; the code location is reloaded, then each
  experiment's chain is queued: its epochs ``e0 … e<epochs-1>`` (after an early stop the rest are
  no-ops) and ``finalize``.

The CLI, the webserver and the daemon share ``DAGSTER_HOME`` (the registry and the dynamic
partitions live there): run them on one machine, as ``make ui`` does.
"""

from __future__ import annotations

import urllib.parse
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trm_assets.domain.errors import TrmError

DEFAULT_URL = "http://127.0.0.1:3000"
LOCATION = "trm_assets"  # workspace.yaml's location_name
REPOSITORY = "__repository__"


class LaunchError(TrmError):
    """A run that could not be submitted (no webserver, unknown experiment, epoch out of range)."""


@dataclass(frozen=True)
class Launched:
    experiment: str
    job: str
    partition: str | None
    run_id: str
    url: str

    def line(self) -> str:
        what = self.job + (f" [{self.partition}]" if self.partition else "")
        return f"{self.experiment:<24} {what:<40} run {self.run_id}  {self.url}"


@dataclass(frozen=True)
class Submission:
    job: str
    partition: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


class Launcher:
    """Submits runs to one webserver; the partitions and registry go to ``DAGSTER_HOME``."""

    def __init__(self, url: str = DEFAULT_URL) -> None:
        from dagster_graphql import DagsterGraphQLClient

        parsed = urllib.parse.urlparse(url)
        if not parsed.hostname:
            raise LaunchError(f"--url {url!r}: expected http://HOST:PORT (e.g. {DEFAULT_URL})")
        self.url = url.rstrip("/")
        # gql (under dagster_graphql) warns about its own call style on every request
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="gql.client")
        self.client = DagsterGraphQLClient(
            parsed.hostname, port_number=parsed.port, use_https=parsed.scheme == "https"
        )

    def ping(self) -> None:
        """Fail fast, before anything is created or queued, when the webserver does not answer
        (a GraphQL error carried its query text into the message)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=10) as r:
                r.read()
        except urllib.error.HTTPError:
            return  # something answers over HTTP: the GraphQL calls say what is wrong
        except OSError as e:
            raise LaunchError(
                f"{self.url}: the Dagster webserver is not reachable ({getattr(e, 'reason', e)});"
                " start it with `make ui` (which also runs the daemon that dequeues runs) or "
                "pass --url"
            ) from None

    def reload(self) -> None:
        """Reload the code location so it serves experiments registered since it loaded."""
        from dagster_graphql import DagsterGraphQLClientError, ReloadRepositoryLocationStatus

        try:
            info = self.client.reload_repository_location(LOCATION)
        except (DagsterGraphQLClientError, OSError) as e:
            raise self._unreachable(e) from None
        if info.status != ReloadRepositoryLocationStatus.SUCCESS:
            raise LaunchError(
                f"{self.url}: reloading code location {LOCATION!r} failed: {info.message}"
            )

    def submit(self, experiment: str, submission: Submission) -> Launched:
        from dagster_graphql import DagsterGraphQLClientError

        tags = dict(submission.tags)
        if submission.partition is not None:
            tags["dagster/partition"] = submission.partition
        job = f"{experiment}__{submission.job}"
        try:
            run_id = self.client.submit_job_execution(
                job, repository_location_name=LOCATION, repository_name=REPOSITORY, tags=tags
            )
        except DagsterGraphQLClientError as e:
            if "JobNotFound" in str(e) or "PipelineNotFound" in str(e):
                raise LaunchError(
                    f"{self.url}: no job {job!r} in code location {LOCATION!r}; is experiment "
                    f"{experiment!r} registered (`trm train` / `trm sweep` do it) and does the "
                    "webserver use the same DAGSTER_HOME?"
                ) from None
            raise self._unreachable(e) from None
        except OSError as e:
            raise self._unreachable(e) from None
        return Launched(experiment, job, submission.partition, run_id, f"{self.url}/runs/{run_id}")

    def _unreachable(self, e: Exception) -> LaunchError:
        return LaunchError(
            f"{self.url}: the Dagster webserver did not answer ({type(e).__name__}: "
            f"{str(e)[:200]}); start it with `make ui` (which also runs the daemon that "
            "dequeues runs) or pass --url"
        )


def epoch_chain(epochs: int) -> list[Submission]:
    """The runs that train an experiment through the queue: each epoch, then finalize."""
    from trm_assets.defs.ops import AFTER_STOP_TAG

    skip = ((AFTER_STOP_TAG, "skip"),)
    return [Submission("epoch", f"e{e}", skip) for e in range(epochs)] + [Submission("finalize")]


def queue_chain(launcher: Launcher, experiment: object, instance: object) -> list[Launched]:
    """Add the experiment's epoch partitions and submit its chain, in order."""
    import dagster as dg

    from trm_assets.defs.experiments import Experiment
    from trm_assets.defs.partitions import ensure_partitions, epoch_key

    assert isinstance(experiment, Experiment) and isinstance(instance, dg.DagsterInstance)
    epochs = experiment.run_config().epochs
    name = f"{experiment.name}__epochs"
    ensure_partitions(instance, name, [epoch_key(e) for e in range(epochs)])
    return [launcher.submit(experiment.name, s) for s in epoch_chain(epochs)]


@dataclass(frozen=True)
class SweepMember:
    name: str
    config: Path
    seed: int
    workspace: Path


def sweep_members(
    name: str, configs: Sequence[Path], seeds: Sequence[int], root: Path
) -> list[SweepMember]:
    """One experiment per (config, seed), named ``<name>_<config stem>_s<seed>``."""
    import re

    from trm_assets.defs.experiments import check_experiment_name

    stems: dict[str, Path] = {}
    out = []
    for cfg in configs:
        stem = re.sub(r"[^A-Za-z0-9_]", "_", cfg.stem)
        if stem in stems:  # the stem names the experiment and its workspace: one per config
            raise LaunchError(
                f"--config {stems[stem]} and --config {cfg} would both be experiment "
                f"{name}_{stem}_s<seed> in {root / name}/{stem}_s<seed> (one workspace, trained "
                "with one of them); give each config once, under a file name of its own"
            )
        stems[stem] = cfg
        for seed in seeds:
            exp_name = check_experiment_name(f"{name}_{stem}_s{seed}")
            out.append(SweepMember(exp_name, cfg, seed, root / name / f"{stem}_s{seed}"))
    return out


def create_sweep(
    members: Sequence[SweepMember], overrides: Sequence[str], dagster_home: Path
) -> list[object]:
    """Create (or reuse) each member's workspace with its seed and register it; returns the
    experiments. A workspace that exists is resumed, never re-created. Every member's config is
    checked against its data first (as `trm init` does), so a sweep whose runs would all fail
    in the daemon creates and registers nothing."""
    from trm_assets.defs.experiments import Experiment, register
    from trm_assets.harness.data.config import check_against_data, config_to_yaml, load_config
    from trm_assets.harness.data.dataset import Dataset, load_dataset
    from trm_assets.harness.storage.workspace import init_workspace

    extras = [(*overrides, f"seed={m.seed}") for m in members]
    configs = [load_config(m.config, extra) for m, extra in zip(members, extras, strict=True)]
    data: dict[tuple[str, str], Dataset] = {}
    for cfg in configs:
        ds = data.get((cfg.questions, cfg.trees))
        if ds is None:  # each data set loaded (and its trees checked) once
            ds = data[cfg.questions, cfg.trees] = load_dataset(cfg)
        check_against_data(cfg, ds.task_types, len(ds.questions))
    out: list[object] = []
    for m, extra, cfg in zip(members, extras, configs, strict=True):
        if not (m.workspace / "manifest.json").exists():
            init_workspace(
                m.workspace,
                questions_ref=cfg.questions,
                config_yaml=config_to_yaml(cfg),
                config_fingerprint=cfg.fingerprint(),
            )
        exp = Experiment(
            name=m.name,
            workspace=str(m.workspace),
            config_path=str(m.config),
            overrides=extra,
        )
        out.append(register(dagster_home, exp))
    return out
