"""``trm launch`` and ``trm sweep`` (command-line front ends of :mod:`trm_assets.defs.launch`,
which submits runs to the Dagster webserver and creates sweeps)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trm_assets.defs.launch import (
    DEFAULT_URL,
    Launcher,
    LaunchError,
    Submission,
    create_sweep,
    queue_chain,
    sweep_members,
)
from trm_assets.domain.errors import TrmError
from trm_assets.harness.loop.plan import Action

if TYPE_CHECKING:
    from trm_assets.defs.experiments import Experiment


def human_errors(fn: Callable[..., None]) -> Callable[..., None]:
    """A TrmError is shown as its message (``Error: …``, exit 1), never as a traceback (these
    commands keep click's own error convention, which their tests and scripts rely on)."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> None:
        try:
            fn(*args, **kwargs)
        except TrmError as e:
            raise click.ClickException(str(e)) from None

    return wrapper


_URL = click.option(
    "--url", default=DEFAULT_URL, show_default=True, help="The Dagster webserver (`make ui`)."
)


@click.command("launch")
@click.option("--experiment", required=True, help="Experiment name (asset key prefix).")
@click.option("--epoch", type=click.IntRange(min=0), default=None, help="Epoch to run.")
@click.option(
    "--job",
    type=click.Choice(["epoch", "slow_update"]),
    default="epoch",
    show_default=True,
    help="epoch: all that is left of the epoch; slow_update: its ten functions.",
)
@click.option("--finalize", is_flag=True, help="Deliver best and evaluate on the test pool.")
@_URL
@human_errors
def launch_cmd(experiment: str, epoch: int | None, job: str, finalize: bool, url: str) -> None:
    """Queue one run of an experiment through the Dagster webserver; prints its id and URL."""
    import dagster as dg

    from trm_assets.defs.build import build_experiment
    from trm_assets.defs.driver import ensure_dagster_home
    from trm_assets.defs.experiments import load_registry
    from trm_assets.defs.ops import epoch_bounds
    from trm_assets.defs.partitions import ensure_partitions, epoch_key

    if finalize == (epoch is not None):
        raise click.UsageError("pass exactly one of --epoch N or --finalize")
    home = ensure_dagster_home()
    known = load_registry(home)
    if experiment not in known:
        names = ", ".join(sorted(known)) or "none"
        raise LaunchError(
            f"{home}/experiments.yaml: no experiment {experiment!r} (registered: {names}); "
            "`trm train --workspace DIR` or `trm sweep` registers one"
        )
    exp = known[experiment]
    launcher = Launcher(url)
    launcher.ping()
    if finalize:
        _refuse_out_of_order(exp, Action("finalize"))
        launcher.reload()  # an experiment registered since the webserver loaded
        launched = launcher.submit(exp.name, Submission("finalize"))
    else:
        assert epoch is not None
        scope = build_experiment(exp).scope
        bounds = epoch_bounds(scope, epoch)
        if bounds is not None:
            raise LaunchError(bounds[1])
        first = (
            Action("step", epoch=epoch, step=0)
            if job == "epoch"
            else Action("slow_update", epoch=epoch, slow_step=1)
        )
        _refuse_out_of_order(exp, first)
        launcher.reload()
        with dg.DagsterInstance.get() as instance:
            ensure_partitions(instance, scope.partitions.epochs_name, [epoch_key(epoch)])
        launched = launcher.submit(exp.name, Submission(job, epoch_key(epoch)))
    click.echo(
        f"run {launched.run_id} queued ({launched.job}"
        + (f" [{launched.partition}])" if launched.partition else ")")
    )
    click.echo(f"UI: {launched.url}")


def _refuse_out_of_order(exp: Experiment, first: Action) -> None:
    """Refuse a launch whose first unit the workspace cannot run yet (the run would fail in
    the daemon after its partition was added, out of order); a unit done already is a no-op."""
    from trm_assets.defs.ops import planned_action
    from trm_assets.defs.sensors import dagster_unit
    from trm_assets.harness.loop.units import status_against

    nxt = planned_action(exp)
    if status_against(first, dagster_unit(nxt), exp.run_config()) == "later":
        raise LaunchError(
            f"experiment {exp.name}: {first.describe()} cannot run yet; the next unit is "
            f"{nxt.describe()}: launch the earlier epochs first (`trm launch --experiment "
            f"{exp.name} --epoch E`), or let the epoch sensor run them"
        )


@click.command("sweep")
@click.option("--name", required=True, help="Sweep name (prefix of its experiments).")
@click.option(
    "--config",
    "configs",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A YAML config (repeat for several).",
)
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a setting.")
@click.option(
    "--root",
    default=Path("workspaces"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the sweep's workspaces go (<root>/<name>/<config>_s<seed>).",
)
@click.option("--no-launch", is_flag=True, help="Create and register only; queue nothing.")
@_URL
@human_errors
def sweep_cmd(
    name: str,
    configs: tuple[Path, ...],
    seeds: str,
    overrides: tuple[str, ...],
    root: Path,
    no_launch: bool,
    url: str,
) -> None:
    """Create a sweep (configs × seeds) as experiments and queue their training in Dagster."""
    import dagster as dg

    from trm_assets.defs.driver import ensure_dagster_home

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"{seeds!r}: expected comma-separated integers") from None
    if not seed_list:
        raise click.BadParameter("expected at least one seed", param_hint="--seeds")
    if len(set(seed_list)) != len(seed_list):
        raise click.BadParameter(f"{seeds!r}: a seed is given twice", param_hint="--seeds")
    launcher = None if no_launch else Launcher(url)
    if launcher is not None:
        launcher.ping()  # before any workspace is created or registered
    home = ensure_dagster_home()
    members = sweep_members(name, configs, seed_list, root)
    experiments = create_sweep(members, overrides, home)
    for m in members:
        click.echo(f"experiment {m.name}: {m.workspace} ({m.config}, seed {m.seed})")
    if no_launch:
        click.echo(f"registered in {home}/experiments.yaml; nothing queued (--no-launch)")
        return
    assert launcher is not None
    launcher.reload()
    with dg.DagsterInstance.get() as instance:
        for exp in experiments:
            for launched in queue_chain(launcher, exp, instance):
                click.echo(launched.line())
    click.echo(
        f"queued; one run per experiment at a time, experiments in parallel. Runs: {url}/runs"
    )
