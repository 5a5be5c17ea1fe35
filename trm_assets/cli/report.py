"""``trm report``: per-epoch accuracies, each beside the skills/prompts pair it was measured on,
its counts (infrastructure failures and aborted gates too), the seed, the best and the delivered
version, and the budget by phase (``--json``: the same
data, the contract :func:`report_data` returns)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from trm_assets.cli.support import WORKSPACE_OPTION, fail_on_trm_error


def report_data(workspace: Path) -> dict[str, Any]:
    """The ``trm report --json`` contract, from the checkpoint and the manifest."""
    from trm_assets.harness.storage.checkpoint import CheckpointError, read_state_file
    from trm_assets.harness.storage.workspace import read_manifest, resolve_paths

    m = read_manifest(workspace)
    path = resolve_paths(workspace).state
    if not path.exists():
        raise CheckpointError(f"{path}: no training state yet; run `trm train` first")
    state = read_state_file(path)
    # every accuracy with the pair that produced it: an epoch's val_accuracy is its latest
    # validation evaluation's (R, or a kept R2), its test_accuracy the current pair's at its end
    epochs = [
        {
            **{
                k: getattr(h, k)
                for k in (
                    "epoch",
                    "val_accuracy",
                    "test_accuracy",
                    "val_expected_accuracy",
                    "accepted",
                    "rejected",
                    "rolled_back",
                    "gates",
                    "expected_false_accepts",
                    "rollouts",
                    "tokens",
                    # infrastructure failures (issue 9): rollouts the endpoint failed, and gates
                    # aborted on them (no verdict decided)
                    "infra_failures",
                    "aborted",
                )
            },
            "val_skills_version": h.val_skills_version or None,
            "val_prompts_version": h.val_prompts_version or None,
            "test_skills_version": h.holdout["current"].skills,
            "test_prompts_version": h.holdout["current"].prompts,
        }
        for h in sorted(state.history, key=lambda h: h.epoch)
    ]
    final = state.final
    seed = state.seed_eval
    best_expected: float | None = None
    if final is not None:
        best_expected = final.val_expected_accuracy
    elif state.history and m.best is not None and _same_pair(state.history[-1].best, m.best):
        # the last epoch report's best, while the manifest's best is still that pair (a slow
        # update under way can have moved it: its expected accuracy is not known yet)
        best_expected = state.history[-1].best.val_expected_accuracy
    elif m.best is not None and seed is not None and seed.skills_version == m.best.skills:
        best_expected = seed.val_expected_accuracy
    return {
        "epochs": epochs,
        "seed": {
            "val_accuracy": seed.val_accuracy if seed else None,
            "val_expected_accuracy": seed.val_expected_accuracy if seed else None,
        },
        "best": {
            "skills_version": m.best.skills if m.best else None,
            "prompts_version": m.best.prompts if m.best else None,
            "val_accuracy": m.best.val_accuracy if m.best else None,
            "val_expected_accuracy": best_expected,
        },
        # what finalize delivered and its test-pool accuracy (GATE §6.5 c: the val/test gap of
        # the delivered version); None until the run is finalized
        "delivered": None
        if final is None
        else {
            "reason": final.reason,
            "skills_version": final.skills_version,
            "prompts_version": final.prompts_version,
            "val_accuracy": final.val_accuracy,
            "val_expected_accuracy": final.val_expected_accuracy,
            "test_accuracy": final.test_accuracy,
            "test_expected_accuracy": final.test_expected_accuracy,
        },
    }


def _f(x: Any) -> str:
    return "   n/a" if x is None else f"{x:6.3f}"


def _pair(skills: str | None, prompts: str | None) -> str:
    return f"{skills or '?'}/{prompts or '?'}"


@click.command("report")
@WORKSPACE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_on_trm_error
def report_cmd(workspace: Path, as_json: bool) -> None:
    """Per-epoch accuracies and counts, the seed and the best version."""
    data = report_data(workspace)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    simulated = data["seed"]["val_expected_accuracy"] is not None
    click.echo(
        f"{'epoch':>5} {'val':>6} {'exp':>6} {'val of':>9} {'test':>6} {'test of':>9} "
        f"{'acc':>4} {'rej':>4} {'rb':>3} {'gates':>5} {'E[FA]':>6} {'rollouts':>9} "
        f"{'tokens':>11} {'infra':>5} {'abort':>5}"
    )
    for e in data["epochs"]:  # each accuracy beside the skills/prompts pair it was measured on
        val_of = _pair(e["val_skills_version"], e["val_prompts_version"])
        test_of = _pair(e["test_skills_version"], e["test_prompts_version"])
        click.echo(
            f"{e['epoch']:>5} {_f(e['val_accuracy'])} {_f(e['val_expected_accuracy'])} "
            f"{val_of:>9} {_f(e['test_accuracy'])} {test_of:>9} {e['accepted']:>4} "
            f"{e['rejected']:>4} {e['rolled_back']:>3} {e['gates']:>5} "
            f"{e['expected_false_accepts']:6.2f} {e['rollouts']:>9} {e['tokens']:>11} "
            f"{e['infra_failures']:>5} {e['aborted']:>5}"
        )
    s, b, d = data["seed"], data["best"], data["delivered"]
    click.echo(f"seed: val {_f(s['val_accuracy'])} expected {_f(s['val_expected_accuracy'])}")
    click.echo(
        f"best: {_pair(b['skills_version'], b['prompts_version'])} val {_f(b['val_accuracy'])} "
        f"expected {_f(b['val_expected_accuracy'])}"
    )
    if d is not None:
        click.echo(
            f"delivered ({d['reason']}): {_pair(d['skills_version'], d['prompts_version'])} "
            f"val {_f(d['val_accuracy'])} test {_f(d['test_accuracy'])} expected "
            f"{_f(d['val_expected_accuracy'])} / {_f(d['test_expected_accuracy'])}"
        )
    if simulated:
        click.echo("(expected accuracies: the SIMULATED world's oracle)")
    _echo_budget(workspace)
    sys.stdout.flush()


def _echo_budget(workspace: Path) -> None:
    """Rollouts and tokens per scope (init, e0, e1, …, final) and phase, from the ledger."""
    from trm_assets.harness.storage.workspace import resolve_paths

    state = json.loads(resolve_paths(workspace).state.read_text(encoding="utf-8"))
    click.echo("budget (rollouts / tokens) by phase:")
    for scope, phases in state["budget"].items():
        parts = [
            f"{phase} {v['rollouts']}/{v['prompt_tokens'] + v['completion_tokens']}"
            for phase, v in sorted(phases.items())
        ]
        click.echo(f"  {scope:<6} " + ", ".join(parts))


def _same_pair(summary: Any, best: Any) -> bool:
    return (summary.skills_version, summary.prompts_version) == (best.skills, best.prompts)
