"""``trm bench frontier``: what any threshold on a gate's evidence could accept (issue 15).

Reads the raw run records of ``trm bench optimizer --runs-out FILE`` and, for one policy's
decided gates, asks: had the rule been "accept when wins − losses ≥ k" on the same evidence,
which share of the helpful, neutral and harmful proposals (simulator ground truth) would it have
accepted, how many harmful edits per run, and how much true expected accuracy (the oracle's
``delta`` of the task type, summed over the accepted proposals, per run)? ``k = 1`` is the point
rule (W > L). Run it on ``full_val_point``'s records: its gates all observe the task type's
whole validation pool in one block, so every proposal's (W, L) is the complete evidence a
validation-only rule can have. The table is the frontier of that family of rules: how much
power a rule can keep at a given harm rate. It reads a file; it runs nothing.

It is an analysis of decisions taken one at a time: it does not replay the loop (an accepted
edit changes later proposals and the budget), so the per-run figures say what the rule would
have let in from these proposals, not what a run with that rule would deliver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from trm_bench.optimizer_run import TRUTHS


@dataclass(frozen=True)
class FrontierRow:
    k: int  # accept when wins − losses ≥ k
    accepted: dict[str, int]  # by ground truth
    rate: dict[str, float | None]  # accepted / gated, by ground truth (None: none gated)
    harmful_per_run: float
    true_delta_per_run_pp: float  # Σ delta of accepted proposals, per run, in points


def frontier(runs: Sequence[Mapping[str, Any]], policy: str, ks: Sequence[int]) -> dict[str, Any]:
    """The frontier table of ``policy``'s decided gates in ``runs`` (records of
    ``--runs-out``). Raises ``ValueError`` if the policy has no runs or its gate records carry no
    evidence (files written before the records had ``wins``/``losses``)."""
    if not all(isinstance(r, Mapping) for r in runs):
        raise ValueError("expected run records (JSON objects), as `--runs-out` writes")
    mine = [r for r in runs if r.get("policy") == policy]
    if not mine:
        found = sorted({str(r.get("policy")) for r in runs})
        raise ValueError(f"no runs of policy {policy!r} in the file (it holds {found})")
    gates = [g for r in mine for g in r["gates"] if g["decided"]]
    if not gates:
        raise ValueError(f"the {len(mine)} runs of {policy!r} hold no decided gate")
    if any("wins" not in g or "losses" not in g for g in gates):
        raise ValueError(
            "the gate records carry no wins/losses: re-run `trm bench optimizer --runs-out` "
            "with this version"
        )
    unknown = sorted({str(g["truth"]) for g in gates} - set(TRUTHS))
    if unknown:
        raise ValueError(f"gate records with an unknown ground truth {unknown}; expected {TRUTHS}")
    gated = {t: sum(1 for g in gates if g["truth"] == t) for t in TRUTHS}
    rows = []
    for k in ks:
        acc = [g for g in gates if g["wins"] - g["losses"] >= k]
        counts = {t: sum(1 for g in acc if g["truth"] == t) for t in TRUTHS}
        rows.append(
            FrontierRow(
                k=k,
                accepted=counts,
                rate={t: (counts[t] / gated[t] if gated[t] else None) for t in TRUTHS},
                harmful_per_run=counts["harmful"] / len(mine),
                true_delta_per_run_pp=100.0 * sum(g["delta"] for g in acc) / len(mine),
            )
        )
    return {
        "policy": policy,
        "runs": len(mine),
        "seeds": sorted(int(r["seed"]) for r in mine),
        "gated": gated,
        "rows": [asdict(r) for r in rows],
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def render(table: Mapping[str, Any]) -> str:
    g = table["gated"]
    lines = [
        f"{table['policy']}, {table['runs']} runs (seeds {table['seeds']}); decided gates: "
        f"{g['helpful']} helpful, {g['neutral']} neutral, {g['harmful']} harmful",
        "| accept when W − L ≥ | helpful accepted | neutral accepted | harmful accepted "
        "| harmful accepted / run | Σ true Δ of accepted / run |",
        "|---|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        rate, n = r["rate"], r["accepted"]
        lines.append(
            f"| {r['k']} | {_pct(rate['helpful'])} ({n['helpful']}) "
            f"| {_pct(rate['neutral'])} ({n['neutral']}) "
            f"| {_pct(rate['harmful'])} ({n['harmful']}) "
            f"| {r['harmful_per_run']:.2f} | {r['true_delta_per_run_pp']:+.2f}pp |"
        )
    return "\n".join(lines)


def read_runs(path: Path) -> list[Any]:
    """The run records of a ``--runs-out`` file (a JSON list), or of its
    ``.partial.jsonl`` companion (one record per line, written while the benchmark runs)."""
    text = path.read_text(encoding="utf-8")
    if path.name.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    runs = json.loads(text)
    if not isinstance(runs, list):
        raise ValueError("expected the JSON list that `--runs-out` writes")
    return list(runs)


@click.command("frontier")
@click.argument("runs_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--policy",
    default="full_val_point",
    show_default=True,
    help="Whose gate records to read (full_val_point's observe each type's whole pool).",
)
@click.option(
    "--max-k", type=click.IntRange(min=1), default=12, show_default=True, help="Largest k."
)
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def cli(runs_file: Path, policy: str, max_k: int, as_json: bool) -> None:
    """Helpful/neutral/harmful acceptance of the rules W − L ≥ k on recorded gate evidence
    (RUNS_FILE: the JSON of `trm bench optimizer --runs-out`, or its `.partial.jsonl` while
    the benchmark runs)."""
    try:
        table = frontier(read_runs(runs_file), policy, range(1, max_k + 1))
    except (ValueError, KeyError, TypeError) as e:
        detail = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise click.ClickException(f"{runs_file}: {detail}") from None
    click.echo(json.dumps(table) if as_json else render(table))
