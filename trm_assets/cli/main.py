"""The ``trm`` command: what is not Dagster-native (data, config, benchmarks, simulator, runs).

Subcommands that live in other layers are registered lazily (``module:attribute`` of a click
command) so ``trm --help`` stays fast and importing the CLI does not import dagster.
"""

from __future__ import annotations

import json
import sys

import click

from trm_assets.cli.support import LazyGroup, TopGroup, fail_on_trm_error


@click.group(
    cls=TopGroup,
    lazy={
        "init": (
            "trm_assets.cli.init:init_cmd",
            "Create a workspace (v1 = the prompt set).",
        ),
        "train": ("trm_assets.cli.train:train_cmd", "Run the training loop."),
        "eval": ("trm_assets.cli.train:eval_cmd", "Evaluate a skills version."),
        "promote": ("trm_assets.cli.train:promote_cmd", "Promote a version to a seed."),
        "report": ("trm_assets.cli.report:report_cmd", "Per-epoch report."),
        "check": ("trm_assets.cli.check:check_cmd", "Verify a workspace (store, state, run log)."),
        "launch": (
            "trm_assets.cli.launch:launch_cmd",
            "Launch an experiment's epoch/slow update through Dagster (prints run id and URL).",
        ),
        "sweep": (
            "trm_assets.cli.launch:sweep_cmd",
            "Create a sweep (configs x seeds) as experiments and launch it through Dagster.",
        ),
        "sim-serve": ("trm_assets.cli.sim:serve", "Serve the SIMULATED LLM over HTTP."),
        "sim-oracle": (
            "trm_assets.cli.sim:oracle",
            "Oracle accuracies of the SIMULATED world.",
        ),
    },
)
@click.version_option(package_name="trm-assets")
def main() -> None:
    """trm-assets: a statistically gated, self-evolving Video-MME agent training loop."""


# --------------------------------------------------------------------------------------------
# trm data


@main.group(
    cls=LazyGroup,
    lazy={"synth": ("trm_assets.cli.sim:synth", "Generate a SIMULATED Video-MME sample.")},
)
def data() -> None:
    """Inspect and generate data (question files and video trees)."""


@data.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def data_check(paths: tuple[str, ...], as_json: bool) -> None:
    """Load question files (json/csv/parquet) and tree files; print counts or every error."""
    from trm_assets.harness.data.datacheck import check_paths
    from trm_assets.harness.data.questions import QuestionSummary

    rep = check_paths(list(paths))
    if not (rep.question_files or rep.trees or rep.errors or rep.skipped):
        click.echo(f"error: no question or tree file under {', '.join(paths)}", err=True)
        sys.exit(1)
    summary = QuestionSummary.of(rep.questions)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": rep.ok,
                    "questions": summary.n,
                    "trees": len(rep.trees),
                    "by_task_type": summary.by_task_type,
                    "by_duration": summary.by_duration,
                    "errors": rep.errors,
                },
                indent=2,
            )
        )
    else:
        if rep.question_files:
            click.echo(f"questions: {summary.n} from {len(rep.question_files)} file(s)")
            click.echo("  by task type:")
            for t, n in summary.by_task_type.items():
                click.echo(f"    {t:<24} {n:>5}")
            click.echo("  by duration:")
            for d, n in summary.by_duration.items():
                click.echo(f"    {d:<24} {n:>5}")
        if rep.trees:
            n_nodes = sum(len(t.nodes) for t in rep.trees.values())
            click.echo(f"trees: {len(rep.trees)} video(s), {n_nodes} nodes")
        for s in rep.skipped:
            click.echo(f"skipped: {s}")
        for e in rep.errors:
            click.echo(f"error: {e}", err=True)
    if not rep.ok:
        sys.exit(1)


# --------------------------------------------------------------------------------------------
# trm bench


@main.group(
    cls=LazyGroup,
    lazy={
        "decoding": (
            "trm_bench.decoding:cli",
            "Are two rollouts of one prompt independent at T? (gate passes)",
        ),
        "frontier": (
            "trm_bench.frontier:cli",
            "What thresholds on recorded gate evidence would accept (issue 15).",
        ),
        "gate": ("trm_bench.gate:cli", "Gate decision quality (GATE §10.3)."),
        "inference": ("trm_bench.inference:cli", "Inference throughput vs the ideal."),
        "optimizer": ("trm_bench.optimizer:cli", "Gate policies on the SIMULATED world."),
        "overhead": ("trm_bench.overhead:cli", "Harness and Dagster overhead."),
        "reliability": ("trm_bench.reliability:cli", "Kill-anywhere resume check."),
        "scale": ("trm_bench.scale:cli", "1x vs 10x questions; lineage query at 1M rows."),
        "real-model": (
            "trm_bench.real_model:real_model",
            "A tiny real training against llama.cpp (SmolLM2 from PyPI).",
        ),
    },
)
def bench() -> None:
    """Benchmarks (results go to benchmarks/RESULTS.md)."""


# --------------------------------------------------------------------------------------------
# trm config


@main.group()
def config() -> None:
    """Resolve and show run configurations."""


@config.command("show")
@click.option("--config", "config_path", type=click.Path(), default=None, help="YAML config file.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a setting.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@fail_on_trm_error
def config_show(config_path: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
    """Print the resolved config (CLI > env/.env > YAML > defaults), without secrets."""
    from trm_assets.harness.data.config import config_to_yaml, load_config

    cfg = load_config(config_path, overrides)
    if as_json:
        click.echo(json.dumps(cfg.model_dump(mode="json"), indent=2))
    else:
        click.echo(config_to_yaml(cfg), nl=False)
    click.echo(f"# fingerprint: {cfg.fingerprint()}", err=True)


# --------------------------------------------------------------------------------------------
# trm run


@main.command("run")
@click.option(
    "--config",
    "config_path",
    type=click.Path(),
    default="data/configs/default.yaml",
    show_default=True,
    help="YAML config file.",
)
@click.option(
    "--workspace",
    type=click.Path(),
    default="workspaces/default",
    show_default=True,
    help="Experiment directory (created when missing, resumed when present).",
)
@fail_on_trm_error
def run(config_path: str, workspace: str) -> None:
    """The main job: create the workspace if needed, then train through Dagster (resuming)."""
    from pathlib import Path

    from trm_assets.cli.train import train_cmd
    from trm_assets.harness.data.config import config_to_yaml, load_config
    from trm_assets.harness.data.dataset import load_dataset
    from trm_assets.harness.storage.lock import workspace_lock
    from trm_assets.harness.storage.pools import (
        build_or_load_pools,
        format_pools_summary,
        pools_summary,
    )
    from trm_assets.harness.storage.workspace import init_workspace

    cfg = load_config(config_path)
    label = "SIMULATED world" if cfg.llm_provider == "sim" else f"model {cfg.agent_model}"
    click.echo(f"config {config_path} (fingerprint {cfg.fingerprint()}), {label}")
    ds = load_dataset(cfg)
    click.echo(
        f"data: {len(ds.questions)} questions, {len(ds.trees)} video trees, "
        f"{len(ds.task_types)} task types from {cfg.questions}"
    )
    ws = Path(workspace)
    if not (ws / "manifest.json").exists():
        init_workspace(  # under its own lock
            ws,
            questions_ref=cfg.questions,
            config_yaml=config_to_yaml(cfg),
            config_fingerprint=cfg.fingerprint(),
        )
        click.echo(f"workspace {ws} created (v1 = the prompt set in prompts/)")
    # one writer (issue 18.1): the pools are frozen under the lock `trm train` takes next, so a
    # command training this workspace refuses this one instead of it writing beside it
    with workspace_lock(ws, command="trm run"):
        p = build_or_load_pools(cfg, ds.questions, ws / "pools.json")
    click.echo(format_pools_summary(pools_summary(p, ds.questions)))
    code = train_cmd.main(
        args=["--workspace", str(ws), "--config", config_path, "--resume"],
        prog_name="trm train",
        standalone_mode=False,
    )
    if isinstance(code, int) and code != 0:  # click returns an Exit's code here (Ctrl-C: 130)
        raise click.exceptions.Exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
