"""``trm train``, ``trm eval``, ``trm promote`` (registered by :mod:`trm_assets.cli`; ``trm
report`` is :mod:`trm_assets.cli.report`). ``trm train`` runs the loop in-process through the
planner; every unit of work checkpoints, so ``--resume`` continues exactly where a stopped run
left off.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from trm_assets.cli.support import WORKSPACE_OPTION, fail_on_trm_error
from trm_assets.domain.errors import TrmError

if TYPE_CHECKING:
    from trm_assets.cli.terminal import Terminal

_SET = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a setting."
)


def progress_reporter(term: Terminal | None = None) -> Any:
    """Progress inside long barriers on stdout (issue 17.4): a bar rewritten in place when
    ``term`` is a TTY, else a line every ``TRM_PROGRESS_EVERY_S`` seconds (default 10)."""
    import os

    from trm_assets.harness.loop.progress import PROGRESS_MARK, ProgressReporter, progress_every_s

    every = progress_every_s(os.environ)
    if term is not None and term.tty:
        return ProgressReporter(lambda _line: None, every_s=every, live=term.progress)
    say = click.echo if term is None else term.echo
    return ProgressReporter(lambda line: say(f"  {PROGRESS_MARK}{line}"), every_s=every)


def _config(workspace: Path, config_path: Path | None, overrides: tuple[str, ...]) -> Any:
    """The config from ``--config``, else the one ``trm init`` stored in the workspace."""
    from trm_assets.harness.data.config import load_config
    from trm_assets.harness.storage.workspace import WorkspaceError, resolve_paths

    if config_path is None:
        stored = resolve_paths(workspace).config
        if not stored.is_file():
            raise WorkspaceError(f"{stored}: no stored config; pass --config FILE")
        config_path = stored
    return load_config(config_path, overrides)


# ------------------------------------------------------------------------------------------------
# trm train


@click.command("train")
@WORKSPACE_OPTION
@click.option(
    "--config", "config_path", required=True, type=click.Path(path_type=Path), help="YAML config."
)
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override `epochs`.")
@click.option("--resume", is_flag=True, help="Continue from the workspace's checkpoint.")
@click.option("--dry-run", is_flag=True, help="Print the pre-flight budget estimate and stop.")
@click.option(
    "--no-dagster",
    is_flag=True,
    help="Call the units directly instead of running each as a Dagster run (same results).",
)
@_SET
@fail_on_trm_error
def train_cmd(
    workspace: Path,
    config_path: Path,
    epochs: int | None,
    resume: bool,
    dry_run: bool,
    no_dagster: bool,
    overrides: tuple[str, ...],
) -> None:
    """Run the training loop (epoch → step → per-skill gate, ten-step slow update) on DIR."""
    from trm_assets.harness.data.config import load_config
    from trm_assets.harness.data.dataset import load_dataset
    from trm_assets.harness.loop.budget import (
        estimate,
        format_estimate,
        format_tokens,
        token_estimate,
    )
    from trm_assets.harness.loop.runner import finished
    from trm_assets.harness.storage.checkpoint import CheckpointError, load_state
    from trm_assets.harness.storage.lock import workspace_lock
    from trm_assets.harness.storage.pools import build_or_load_pools
    from trm_assets.harness.storage.workspace import resolve_paths

    extra = (f"epochs={epochs}",) if epochs is not None else ()
    cfg = load_config(config_path, (*overrides, *extra))
    paths = resolve_paths(workspace)
    label = "SIMULATED world" if cfg.llm_provider == "sim" else f"model {cfg.agent_model}"
    if dry_run:  # every check the run would make on its inputs first, then the estimate
        if cfg.llm_provider != "sim":  # the endpoint's settings (no call is made)
            from trm_assets.llm.factory import endpoint_settings

            endpoint_settings()
        ds = load_dataset(cfg, with_trees=False)
        if paths.state.exists():  # a structural change is refused on resume: refused here too
            load_state(paths.state, cfg)
        pools = build_or_load_pools(
            cfg, ds.questions, None if not paths.pools.exists() else paths.pools
        )
        est = estimate(cfg, ds.questions, pools)
        tokens = token_estimate(workspace, cfg)
        click.echo(f"config {config_path} (fingerprint {cfg.fingerprint()}), {label}")
        click.echo(format_estimate(est))
        click.echo(format_tokens(est, tokens))
        return
    # one writer per workspace for the whole command (issue 18.1); the units' Dagster runs
    # re-enter it in this process, any other process is refused naming this one
    with workspace_lock(workspace, command="trm train"):
        if paths.state.exists() and not resume:
            raise CheckpointError(
                f"{paths.state}: this workspace already has a training state; pass --resume to "
                "continue it, or `trm init` a new workspace to start over"
            )
        if resume and (done := finished(paths.state, cfg)) is not None:
            if not no_dagster:  # what a kill left in the instance: lost runs, unpublished units
                _settle_dagster(workspace, config_path, (*overrides, *extra))
            click.echo(f"{done}; report: trm report --workspace {workspace}")
            return
        from trm_assets.cli.terminal import Terminal

        term = Terminal()
        progress_reporter(term)  # a bad TRM_PROGRESS_EVERY_S is an error on either path
        term.echo(f"training {workspace} with {config_path} ({label}, {cfg.epochs} epoch(s))")
        try:
            with term.logging():
                if not no_dagster:
                    _train_through_dagster(workspace, config_path, (*overrides, *extra), term)
                    return
                _train_in_process(workspace, cfg, resume, term)
        finally:  # an error or Ctrl-C inside a barrier: its bar ends before the message
            term.close()


def _train_in_process(workspace: Path, cfg: Any, resume: bool, term: Terminal) -> None:
    from trm_assets.harness.loop.context import loop_context
    from trm_assets.harness.loop.runner import current_action, train
    from trm_assets.llm.factory import build_providers

    with loop_context(workspace, cfg, build_providers(cfg.provider_spec())) as ctx:
        ctx.observers = (progress_reporter(term),)
        first = current_action(ctx)
        if resume and first.kind != "init":
            term.echo(f"resuming at {first.describe()}")
        try:
            summary = train(ctx, echo=term.echo)
        except KeyboardInterrupt:  # as through Dagster: say so, exit like Ctrl-C (not "Aborted!")
            term.close()
            try:
                during = f" during {current_action(ctx).describe()}"  # not checkpointed
            except TrmError:
                during = ""
            click.echo(
                f"interrupted{during}; the workspace is at its last checkpoint: "
                "`trm train --resume` continues where it stopped",
                err=True,
            )
            raise click.exceptions.Exit(130) from None
    click.echo(f"{summary.last.describe()}: {summary.units} unit(s) of work run")
    click.echo(f"report: trm report --workspace {workspace}")


def _train_through_dagster(
    workspace: Path, config_path: Path, overrides: tuple[str, ...], term: Terminal
) -> None:
    """Every unit as a Dagster run in the project's instance (visible in `make ui`)."""
    import dagster as dg

    from trm_assets.defs.driver import TrainingInterrupted, drive, ensure_dagster_home
    from trm_assets.defs.resources import TrmResource

    home = ensure_dagster_home()
    term.echo(f"dagster instance: {home} (each unit of work is a Dagster run)")
    trm = TrmResource(
        workspace=str(workspace), config_path=str(config_path), overrides=list(overrides)
    )
    with dg.DagsterInstance.get() as instance:
        try:
            summary = drive(trm, instance, echo=term.echo, live=term.progress if term.tty else None)
        except TrainingInterrupted as e:  # not an error to fix: say so, exit like Ctrl-C
            term.close()
            click.echo(str(e), err=True)
            raise click.exceptions.Exit(130) from None
    click.echo(f"{summary.last.describe()}: {summary.runs} Dagster run(s)")
    click.echo(f"report: trm report --workspace {workspace}")
    click.echo(f"UI:     make ui → Catalog → folder {summary.experiment} (DAGSTER_HOME={home})")


def _settle_dagster(workspace: Path, config_path: Path, overrides: tuple[str, ...]) -> None:
    """A finished workspace's Dagster record after a kill: its runs left in progress are marked
    failed and its unpublished partitions published (hostile pass: a kill right after finalize's
    checkpoint left the finalize run STARTED for good; one after a slow update's, ``epoch_eval``
    unpublished). Says nothing when there is nothing to settle."""
    import dagster as dg

    from trm_assets.defs.driver import drive, ensure_dagster_home
    from trm_assets.defs.resources import TrmResource
    from trm_assets.defs.sensors import WORKSPACE_TAG

    ensure_dagster_home()
    trm = TrmResource(
        workspace=str(workspace), config_path=str(config_path), overrides=list(overrides)
    )
    mine = dg.RunsFilter(tags={WORKSPACE_TAG: str(workspace.resolve())})
    with dg.DagsterInstance.get() as instance:
        if instance.get_runs(filters=mine, limit=1):  # else trained with --no-dagster only
            drive(trm, instance, echo=click.echo)


# ------------------------------------------------------------------------------------------------
# trm eval


@click.command("eval")
@WORKSPACE_OPTION
@click.option("--version", "version", required=True, help="Skills version (vN).")
@click.option(
    "--pool", type=click.Choice(["validation", "test"]), required=True, help="Which pool."
)
@click.option(
    "--prompts", "prompts_version", default=None, help="Prompts version (default: current)."
)
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
@_SET
@fail_on_trm_error
def eval_cmd(
    workspace: Path,
    version: str,
    pool: str,
    prompts_version: str | None,
    config_path: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Evaluate a stored skills version on a pool; prints the run id to promote."""
    import asyncio

    from trm_assets.cli.terminal import Terminal
    from trm_assets.harness.loop.context import loop_context
    from trm_assets.harness.loop.step import evaluate
    from trm_assets.harness.storage.lock import workspace_lock
    from trm_assets.harness.storage.runlog import RunLogReader, run_decoding, run_meta
    from trm_assets.harness.storage.workspace import eval_command_kind
    from trm_assets.llm.factory import build_providers

    cfg = _config(workspace, config_path, overrides)
    with (
        workspace_lock(workspace, command="trm eval"),
        loop_context(workspace, cfg, build_providers(cfg.provider_spec())) as ctx,
    ):
        term = Terminal()
        ctx.observers = (progress_reporter(term),)
        pv = prompts_version or ctx.paths.prompts_version
        ctx.skills(version)  # a missing version fails before any rollout
        base = f"eval_{version}_{pv}_{pool}"
        dh = ctx.decoding_hash()
        ctx.log.flush()
        with RunLogReader.open(ctx.paths.run_db) as reader:
            # a run on record decoded by another model / world, or over other trees, is another
            # run: the first id that is free or holds this evaluation's (the last names both
            # hashes, so it is one or the other)
            for run_id in (base, f"{base}_{dh}", f"{base}_{dh}_{ctx.data_digest}"):
                row = reader.run(run_id)
                if row is None or (
                    run_decoding(row) in (None, dh) and ctx.same_data(run_meta(row.get("meta")))
                ):
                    break
        if row is not None and row.get("status") == "done":
            acc = row.get("accuracy")
            click.echo(f"run {run_id} already evaluated (reused)")
        else:
            qs = ctx.pool_questions(pool)
            click.echo(
                f"evaluating skills {version} / prompts {pv} on {pool} ({len(qs)} questions)"
            )
            try:
                with term.logging():
                    res = asyncio.run(
                        evaluate(ctx, run_id, version, pv, qs, eval_command_kind(pool))
                    )
            finally:  # an error or Ctrl-C inside the barrier: its bar ends before the message
                term.close()
            acc = res.accuracy
        exp = ctx.expected_accuracy(version, pv, list(ctx.pools.pool(pool)))
    line = f"run {run_id}: accuracy {acc if acc is None else f'{acc:.3f}'}"
    if exp is not None:
        line += f" (expected {exp:.3f}, SIMULATED)"
    click.echo(line)
    click.echo(
        f"promote with: trm promote --workspace {workspace} --version {version} "
        f"--eval-run {run_id} --name NAME"
    )


# ------------------------------------------------------------------------------------------------
# trm promote


@click.command("promote")
@WORKSPACE_OPTION
@click.option("--version", "version", required=True, help="Skills version (vN).")
@click.option("--eval-run", "eval_run", required=True, help="The evaluation run that proves it.")
@click.option("--name", required=True, help="Seed name.")
@click.option(
    "--seeds-dir", default=Path("seeds"), show_default=True, type=click.Path(path_type=Path)
)
@fail_on_trm_error
def promote_cmd(workspace: Path, version: str, eval_run: str, name: str, seeds_dir: Path) -> None:
    """Promote a skills version (with its evaluation run) to a named seed."""
    from trm_assets.harness.storage.workspace import promote_version

    seed = promote_version(
        workspace, version=version, eval_run_id=eval_run, name=name, seeds_dir=seeds_dir
    )
    click.echo(f"seed {seed.meta.name} written to {seed.directory}")
