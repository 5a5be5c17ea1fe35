"""``trm check WORKSPACE``: verify the store, manifest, state, run log, ladder and cache.

Registered by :mod:`trm_assets.cli` as ``check_cmd``. Exit code 0 when the workspace is intact,
1 with one ``problem:`` line per problem otherwise (notes are informational).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from trm_assets.cli.support import fail_on_trm_error


@click.command("check")
@click.argument("workspace", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_on_trm_error
def check_cmd(workspace: Path, as_json: bool) -> None:
    """Verify everything WORKSPACE holds (read-only) and list every problem.

    Every version's files against its _meta.json hashes, the manifest's and the checkpoint's
    pointers, state.json, the run log (present, readable, this workspace's), pools.json,
    ladder.json and the baseline cache.
    """
    from trm_assets.harness.storage.integrity import check_workspace

    report = check_workspace(workspace)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "workspace": str(report.workspace),
                    "ok": report.ok,
                    "problems": report.problems,
                    "notes": report.notes,
                    "checked": report.checked,
                },
                indent=2,
            )
        )
    else:
        for note in report.notes:
            click.echo(f"note: {note}")
        for problem in report.problems:
            click.echo(f"problem: {problem}", err=True)
        counts = ", ".join(f"{n} {what}" for what, n in report.checked.items())
        if report.ok:
            click.echo(f"ok: {workspace} ({counts})")
        else:
            click.echo(f"{workspace}: {len(report.problems)} problem(s) ({counts})", err=True)
    if not report.ok:
        sys.exit(1)
