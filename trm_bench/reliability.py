"""``trm bench reliability``: kill-anywhere resume (issue 9, SPEC 5.7).

One uninterrupted training run is the reference. Then, N times: a fresh copy of the same
initialised workspace is trained by ``trm train`` in a child process, which receives **SIGKILL**
at a seeded random moment (asynchronous: it can land inside a rollout, a DuckDB flush, an atomic
file write, a gate block, a slow-update function …); the workspace is resumed with
``trm train --resume`` — or, for every ``--dagster-every``-th kill, through a Dagster re-launch
(:func:`trm_assets.defs.driver.drive`, the same jobs the epoch sensor launches) — and its final
state is compared with the reference. When ``trm train`` itself runs each unit as a Dagster run
(its default once it has ``--no-dagster``), the other resumes alternate between that default and
``--no-dagster``, so both paths are exercised.

Kill times are stratified over the reference run's training span (kill ``i`` of ``N`` at a
uniform point of the ``i``-th ``1/N`` slice), so the kills are spread over init, steps, gates,
the ten slow-update functions and finalize instead of clustering by chance.

What is compared (:func:`final_digest`), each as a SHA-256 unless said otherwise:

* every file of ``store/`` (skill and prompt files of every version, and their ``_meta.json``
  **without** ``created_at``: the wall-clock time a version was written — informational, never
  read by the loop; a resumed run writes the version again at a later time);
* ``manifest.json``, ``state.json`` (correctness, accuracies, history, budget ledger, …),
  ``ladder.json``, ``pools.json``, ``config.yaml`` and every ``baseline_cache/*.json`` byte for
  byte;
* the list of every path in the workspace (a leftover temp dir or stray file is a difference),
  except ``runs.duckdb`` and its ``.wal`` (compared by content below);
* the accuracies (``state.history`` val/test accuracies and the final ones), spelled out;
* every table of the run log, row by row, without the wall-clock columns ``started_at``,
  ``finished_at``, ``wall_s``, ``latency_s`` and ``created_at`` (times, not results), plus per
  table the row count and the number of duplicated primary keys; prediction rows per run id
  (none lost, none duplicated).

``--json`` prints exactly ``{"kills": N, "identical": k, "mismatches": [...]}``; progress and
the per-kill table go to stderr.

Why it is long: the kill-anywhere harness (reference run, kill points, three resume paths, digests)
is one experiment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "data" / "configs" / "smoke.yaml"

#: Columns holding wall-clock times (or durations): never part of a result.
WALL_CLOCK_COLUMNS: frozenset[str] = frozenset(
    {"started_at", "finished_at", "wall_s", "latency_s", "created_at"}
)
#: ``_meta.json`` field holding the wall-clock time a version was written.
META_TIME_FIELD = "created_at"
#: Workspace entries compared by content through DuckDB, not as bytes.
RUN_DB_FILES: frozenset[str] = frozenset({"runs.duckdb", "runs.duckdb.wal"})
#: Primary keys of the run-log tables (for the duplicate count).
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "predictions": ("run_id", "question_id", "replicate"),
    "traces": ("run_id", "question_id", "replicate", "seq"),
    "runs": ("run_id",),
}

Echo = Callable[[str], None]

# The child processes run ``trm train`` (the click command object itself, so the bench does not
# depend on how the top-level group registers it) and the Dagster driver.
_TRAIN_CHILD = (
    "import sys; from trm_assets.cli.train import train_cmd; "
    "sys.exit(train_cmd.main(args=sys.argv[1:], prog_name='trm train'))"
)
_DAGSTER_CHILD = (
    "import sys; from trm_bench.reliability import dagster_resume_main; "
    "sys.exit(dagster_resume_main(sys.argv[1:]))"
)


# ------------------------------------------------------------------------------------------------
# the digest of a finished workspace


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path) -> str:
    data = path.read_bytes()
    if path.name == "_meta.json":
        meta = json.loads(data)
        meta.pop(META_TIME_FIELD, None)
        data = json.dumps(meta, sort_keys=True).encode()
    elif path.name == "manifest.json":  # every workspace has its own random identity
        manifest = json.loads(data)
        manifest.pop("workspace_id", None)
        data = json.dumps(manifest, sort_keys=True).encode()
    return _sha(data)


def _run_log_digest(run_db: Path) -> dict[str, str]:
    """Per table: content hash without wall-clock columns, row count, duplicated keys; and
    prediction rows per run id."""
    from trm_assets.harness.storage.runlog import RunLogReader

    out: dict[str, str] = {}
    if not run_db.exists():
        return {"runs.duckdb": "missing"}
    with RunLogReader.open(run_db, retries=20, wait_s=0.25) as reader:
        tables = sorted(
            r["name"] for r in reader.query("SELECT table_name AS name FROM duckdb_tables()")
        )
        for table in tables:
            if table == "workspace_identity":  # the workspace's own random id
                continue
            cols = [
                r["name"]
                for r in reader.query(
                    "SELECT column_name AS name FROM duckdb_columns() WHERE table_name = ? "
                    "ORDER BY column_index",
                    [table],
                )
                if r["name"] not in WALL_CLOCK_COLUMNS
            ]
            sel = ", ".join(f'"{c}"' for c in cols)
            rows = reader.query(f'SELECT {sel} FROM "{table}" ORDER BY ALL')
            blob = json.dumps(rows, sort_keys=True, default=str).encode()
            out[f"db:{table}"] = _sha(blob)
            out[f"db:{table}:rows"] = str(len(rows))
            key = PRIMARY_KEYS.get(table)
            if key is not None:
                k = ", ".join(key)
                dup = reader.query(
                    f'SELECT count(*) AS n FROM (SELECT {k} FROM "{table}" GROUP BY {k} '
                    "HAVING count(*) > 1)"
                )
                out[f"db:{table}:duplicated_keys"] = str(dup[0]["n"])
        if "predictions" in tables:
            for r in reader.query(
                "SELECT run_id, count(*) AS n FROM predictions GROUP BY run_id ORDER BY run_id"
            ):
                out[f"predictions:{r['run_id']}"] = str(r["n"])
    return out


def _accuracies(state_path: Path) -> dict[str, str]:
    if not state_path.exists():
        return {"accuracies": "no state.json"}
    state = json.loads(state_path.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for h in state.get("history", []):
        for k in ("val_accuracy", "test_accuracy", "val_expected_accuracy"):
            out[f"accuracy:e{h.get('epoch')}:{k}"] = repr(h.get(k))
    for k, v in sorted((state.get("final") or {}).items()):
        if "accuracy" in k:
            out[f"accuracy:final:{k}"] = repr(v)
    return out


def final_digest(workspace: Path) -> dict[str, str]:
    """Everything that must be identical between a killed-and-resumed run and the reference."""
    ws = Path(workspace)
    out: dict[str, str] = {}
    listing: list[str] = []
    for p in sorted(ws.rglob("*")):
        rel = p.relative_to(ws).as_posix()
        if rel in RUN_DB_FILES:
            continue
        listing.append(rel + ("/" if p.is_dir() else ""))
        if p.is_file() and (
            rel.startswith("store/")
            or rel.startswith("baseline_cache/")
            or rel in ("manifest.json", "state.json", "ladder.json", "pools.json", "config.yaml")
        ):
            out[f"file:{rel}"] = _file_digest(p)
    out["listing"] = _sha("\n".join(listing).encode())
    out.update(_accuracies(ws / "state.json"))
    out.update(_run_log_digest(ws / "runs.duckdb"))
    return out


def digest_differences(reference: dict[str, str], got: dict[str, str]) -> list[str]:
    """Names of the compared items that differ (or exist on one side only)."""
    return sorted(k for k in set(reference) | set(got) if reference.get(k) != got.get(k))


def leftover_paths(reference_ws: Path, ws: Path) -> list[str]:
    """Paths present in one workspace and not the other (explains a ``listing`` difference)."""

    def names(root: Path) -> set[str]:
        return {
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.relative_to(root).as_posix() not in RUN_DB_FILES
        }

    a, b = names(reference_ws), names(ws)
    return sorted([f"+{x}" for x in b - a] + [f"-{x}" for x in a - b])


# ------------------------------------------------------------------------------------------------
# child processes


@dataclass
class ChildRun:
    returncode: int | None
    wall_s: float
    first_line_s: float | None  # when the child printed its first line (training started)
    last_line_s: float | None  # when it printed its last line (training over, exit follows)
    killed_at_s: float | None
    stdout_tail: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)


def _child_env(dagster_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DAGSTER_HOME"] = str(dagster_home)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def run_child(
    args: Sequence[str],
    *,
    env: dict[str, str],
    timeout_s: float,
    kill_after_first_line_s: float | None = None,
) -> ChildRun:
    """Run ``args`` (cwd = the repository); SIGKILL it ``kill_after_first_line_s`` seconds after
    its first stdout line (the moment ``trm train`` starts). Always bounded by ``timeout_s``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(args),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    first = threading.Event()
    first_at: list[float] = []
    last_at: list[float] = []
    out_lines: list[str] = []
    err_lines: list[str] = []

    def pump_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not first_at:
                first_at.append(time.monotonic() - t0)
                first.set()
            out_lines.append(line.rstrip("\n"))
            last_at[:] = [time.monotonic() - t0]
        first.set()

    def pump_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line.rstrip("\n"))

    threads = [threading.Thread(target=f, daemon=True) for f in (pump_out, pump_err)]
    for t in threads:
        t.start()
    killed_at: float | None = None
    deadline = t0 + timeout_s
    if kill_after_first_line_s is not None:
        first.wait(timeout=max(0.0, deadline - time.monotonic()))
        if first_at:
            target = t0 + first_at[0] + kill_after_first_line_s
            while time.monotonic() < target and proc.poll() is None:
                time.sleep(min(0.01, max(0.0, target - time.monotonic())))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                killed_at = time.monotonic() - t0
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    for t in threads:
        t.join(timeout=10)
    return ChildRun(
        returncode=proc.returncode,
        wall_s=time.monotonic() - t0,
        first_line_s=first_at[0] if first_at else None,
        last_line_s=last_at[0] if last_at else None,
        killed_at_s=killed_at,
        stdout_tail=out_lines[-5:],
        stderr_tail=err_lines[-8:],
    )


def train_args(
    workspace: Path,
    config: Path,
    overrides: Sequence[str],
    resume: bool,
    *,
    no_dagster: bool = False,
) -> list[str]:
    args = [sys.executable, "-c", _TRAIN_CHILD, "--workspace", str(workspace)]
    args += ["--config", str(config)]
    for o in overrides:
        args += ["--set", o]
    return args + (["--resume"] if resume else []) + (["--no-dagster"] if no_dagster else [])


def has_no_dagster_path() -> bool:
    """Whether ``trm train`` runs units as Dagster runs by default (and has ``--no-dagster``)."""
    from trm_assets.cli.train import train_cmd

    return any(p.name == "no_dagster" for p in train_cmd.params)


def dagster_args(workspace: Path, config: Path, overrides: Sequence[str]) -> list[str]:
    args = [sys.executable, "-c", _DAGSTER_CHILD, str(workspace), str(config)]
    return args + list(overrides)


def dagster_resume_main(argv: Sequence[str]) -> int:
    """Child entry point: resume a workspace through Dagster runs (the epoch sensor's jobs,
    executed by :func:`trm_assets.defs.driver.drive` against ``DAGSTER_HOME``'s instance)."""
    import dagster as dg

    from trm_assets.defs.driver import drive, ensure_dagster_home
    from trm_assets.defs.resources import TrmResource

    workspace, config, *overrides = argv
    ensure_dagster_home()
    trm = TrmResource(workspace=workspace, config_path=config, overrides=list(overrides))
    with dg.DagsterInstance.get() as instance:
        print(f"resuming {workspace} through Dagster", flush=True)
        summary = drive(trm, instance, echo=lambda m: print(m, flush=True))
    print(f"{summary.last.describe()}: {summary.runs} Dagster run(s)", flush=True)
    return 0


def interrupted_unit(workspace: Path, config: Path, overrides: Sequence[str]) -> str:
    """The unit of work the kill interrupted (the planner's next unit at the checkpoint)."""
    from trm_assets.domain.errors import TrmError
    from trm_assets.harness.data.config import load_config
    from trm_assets.harness.loop.plan import next_action, progress_of
    from trm_assets.harness.storage.checkpoint import load_state

    try:
        with contextlib.chdir(REPO):  # the config's data paths are relative to the repository
            cfg = load_config(config, overrides)
            state = load_state(workspace / "state.json", cfg)
    except (TrmError, OSError, ValueError) as e:
        return f"unreadable checkpoint ({type(e).__name__}: {e})"
    return next_action(progress_of(state, cfg)).describe()


# ------------------------------------------------------------------------------------------------
# the benchmark


@dataclass
class KillTrial:
    kill: int
    planned_s: float  # seconds after training started (rescaled to a faster run's own span)
    killed: bool  # False: three attempts all finished before the planned moment
    interrupted: str  # the unit of work in progress when killed
    resumed_via: str  # "trm train --resume" [" --no-dagster"] | "dagster" (the driver)
    resume_rc: int | None
    resume_s: float
    differences: list[str]
    detail: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.killed and self.resume_rc == 0 and not self.differences


@dataclass
class ReliabilityResult:
    kills: int
    reference_s: float
    trials: list[KillTrial]

    @property
    def identical(self) -> int:
        return sum(t.identical for t in self.trials)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` contract: exactly ``kills``, ``identical`` and ``mismatches``."""
        return {
            "kills": self.kills,
            "identical": self.identical,
            "mismatches": [
                {k: v for k, v in asdict(t).items()} for t in self.trials if not t.identical
            ],
        }


def kill_points(n: int, span_s: float, seed: int) -> list[float]:
    """Stratified seeded kill moments: one uniform point in each ``1/n`` slice of the span."""
    rng = random.Random(seed)
    return [span_s * (i + rng.uniform(0.02, 0.98)) / n for i in range(n)]


def init_template(root: Path, config: Path, overrides: Sequence[str]) -> Path:
    """``trm init`` once; every trial starts from a byte copy of this workspace."""
    from trm_assets.harness.data.config import load_config
    from trm_bench.overhead import new_workspace

    with contextlib.chdir(REPO):  # the config's data paths are relative to the repository
        return new_workspace(root / "template", load_config(config, overrides))


def run_reliability(
    kills: int,
    *,
    seed: int = 0,
    config: Path = DEFAULT_CONFIG,
    overrides: Sequence[str] = (),
    dagster_every: int = 3,
    workdir: Path | None = None,
    timeout_s: float = 900.0,
    echo: Echo | None = None,
) -> ReliabilityResult:
    """Reference run, then ``kills`` killed-and-resumed runs compared with it."""
    say = echo or (lambda _m: None)
    config = Path(config).resolve()
    own_root = workdir is None
    root = Path(tempfile.mkdtemp(prefix="trm-reliability-")) if workdir is None else workdir
    if workdir is not None and workdir.exists() and any(workdir.iterdir()):
        raise click.UsageError(f"--workdir {workdir}: not empty (give a fresh directory)")
    root.mkdir(parents=True, exist_ok=True)
    try:
        env = _child_env(root / "dagster_home")
        two_paths = has_no_dagster_path()
        template = init_template(root, config, overrides)
        ref_ws = root / "reference"
        shutil.copytree(template, ref_ws)
        say(f"reference: training {ref_ws} uninterrupted ({config.name})")
        ref = run_child(train_args(ref_ws, config, overrides, False), env=env, timeout_s=timeout_s)
        if ref.returncode != 0 or ref.first_line_s is None or ref.last_line_s is None:
            raise click.ClickException(
                "the reference run failed:\n" + "\n".join(ref.stdout_tail + ref.stderr_tail)
            )
        span = ref.last_line_s - ref.first_line_s
        say(f"reference: {ref.wall_s:.1f} s (training span {span:.1f} s)")
        reference = final_digest(ref_ws)
        trials: list[KillTrial] = []
        for i, at in enumerate(kill_points(kills, span, seed)):
            ws = root / f"kill{i:03d}"
            for _attempt in range(3):  # a run faster than the reference may end before the kill
                shutil.rmtree(ws, ignore_errors=True)
                shutil.copytree(template, ws)
                child = run_child(
                    train_args(ws, config, overrides, False),
                    env=env,
                    timeout_s=timeout_s,
                    kill_after_first_line_s=at,
                )
                killed = child.killed_at_s is not None
                if killed:
                    break
                # faster than the reference: the same fraction of this run's own span
                if child.first_line_s is not None and child.last_line_s is not None:
                    at = min(at * 0.9, (at / span) * (child.last_line_s - child.first_line_s))
                else:
                    at *= 0.9
            where = interrupted_unit(ws, config, overrides) if killed else "finished before kill"
            via_dagster = dagster_every > 0 and i % dagster_every == dagster_every - 1
            # `trm train` may itself run each unit as a Dagster run: then alternate the other
            # resumes between its default path and its direct (--no-dagster) path
            direct = two_paths and not via_dagster and i % 2 == 1
            args = (
                dagster_args(ws, config, overrides)
                if via_dagster
                else train_args(ws, config, overrides, True, no_dagster=direct)
            )
            via = (
                "dagster"
                if via_dagster
                else "trm train --resume" + (" --no-dagster" if direct else "")
            )
            resumed = run_child(args, env=env, timeout_s=timeout_s)
            detail: list[str] = []
            if resumed.returncode != 0:
                diffs = ["resume failed"]
                detail = resumed.stdout_tail + resumed.stderr_tail
            else:
                diffs = digest_differences(reference, final_digest(ws))
                if "listing" in diffs:
                    detail = leftover_paths(ref_ws, ws)[:20]
            trial = KillTrial(
                kill=i,
                planned_s=round(at, 2),
                killed=killed,
                interrupted=where,
                resumed_via=via,
                resume_rc=resumed.returncode,
                resume_s=round(resumed.wall_s, 1),
                differences=diffs,
                detail=detail,
            )
            trials.append(trial)
            status = "identical" if trial.identical else f"DIFFERENT {diffs[:6]}"
            say(
                f"kill {i + 1}/{kills} at {at:6.2f} s in {where}; resumed via "
                f"{trial.resumed_via} in {resumed.wall_s:.1f} s: {status}"
            )
            if trial.identical and own_root:
                shutil.rmtree(ws, ignore_errors=True)
        return ReliabilityResult(kills, round(ref.wall_s, 1), trials)
    finally:
        if own_root:
            shutil.rmtree(root, ignore_errors=True)


@click.command("reliability")
@click.option("--kills", type=click.IntRange(min=1), required=True, help="Kills to run.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the kill moments.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=DEFAULT_CONFIG,
    show_default=True,
    help="Training config (the 2-epoch smoke run by default).",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a setting.")
@click.option(
    "--dagster-every",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Resume every K-th kill through a Dagster re-launch (0: never).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the workspaces here (default: a temporary directory, removed).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=900.0,
    show_default=True,
    help="Seconds allowed to any one training or resume process (then it is killed).",
)
def cli(
    kills: int,
    seed: int,
    as_json: bool,
    config_path: Path,
    overrides: tuple[str, ...],
    dagster_every: int,
    workdir: Path | None,
    timeout_s: float,
) -> None:
    """SIGKILL a training run at N seeded random moments, resume each, and compare the final
    state byte for byte with an uninterrupted run (SPEC 5.7)."""
    t0 = time.monotonic()
    res = run_reliability(
        kills,
        seed=seed,
        config=config_path,
        overrides=overrides,
        dagster_every=dagster_every,
        workdir=workdir,
        timeout_s=timeout_s,
        echo=lambda m: click.echo(m, err=True),
    )
    wall = time.monotonic() - t0
    if as_json:
        click.echo(json.dumps(res.to_json(), indent=2))
    else:
        click.echo(
            f"kills {res.kills}: {res.identical} identical to the uninterrupted run "
            f"(reference {res.reference_s:.1f} s, total {wall:.0f} s)"
        )
        for t in res.trials:
            if not t.identical:
                click.echo(f"  kill {t.kill} in {t.interrupted}: {t.differences} {t.detail}")
    click.echo(f"total {wall:.0f} s", err=True)
    if res.identical != res.kills and not as_json:
        sys.exit(1)  # with --json the counts say it; JSON consumers read the document
