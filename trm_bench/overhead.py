"""``trm bench overhead``: what the harness and Dagster add on top of the model's latency.

**Epoch wall time against the ideal.** One epoch of the real loop (its steps and the ten
slow-update functions; ``init`` runs first, untimed) with the SIMULATED provider at a fixed
latency per model call and a given concurrency — by default the epoch of
``data/configs/smoke.yaml`` as it ships (``--config`` picks another, e.g. the main job's).
The simulated latency is the time a call takes as the caller sees it (the simulator's own CPU
time is part of it, as a remote server's compute is). The ideal is the time the model calls
alone need *under the loop's barriers*: every ``run_inference`` call is a barrier (a gate block's
baseline misses, then its candidate block; a step's batch; R; R2; a held-out evaluation), so for
each call

    ideal_call = max(Σ_rollouts calls × latency / concurrency, max_rollout calls × latency)

(no schedule can beat the total work spread over the slots, nor the longest sequential rollout),
plus the diagnosis/evolution/momentum calls: diagnosis runs ``concurrency`` calls at a time,
a step's evolution calls are started together (one latency per step; until 2026-12-02 they ran
one after another and the ideal counted one latency per call), momentum and system/tool calls
are gathered (one latency per round). ``ratio = wall / ideal`` (``null`` at 0 ms, where the ideal is
0: that row is the harness's own CPU time).

**Dagster's added time per step.** The same step (epoch 0, step 0) on identical copies of an
initialized workspace, three ways: the harness unit called directly (open the loop context, run
the unit, close); the ``gate_step`` job through ``execute_in_process`` (what ``trm train`` via
Dagster does); and a run launched out of process by ``dagster job launch`` with the shipped
``DefaultRunCoordinator`` against a temporary ``DAGSTER_HOME`` — the path a sensor-launched run
takes (the sensor's tick interval, ``minimum_interval_seconds``, comes on top and is reported, not
measured). Added time = median(mode) − median(direct).

Why it is long: the measurement, its two reference schedules and the Dagster cells share their
workspace setup.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import click
import yaml

from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.config import (
    RunConfig,
    config_to_yaml,
    load_config,
    read_yaml_config,
)
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.observer import LoopObserver
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.rollouts import ROLLOUTS_PER_SLOT, InferenceResult
from trm_assets.harness.loop.runner import current_action, run_action
from trm_assets.harness.storage.checkpoint import load_state, wait_for_commits
from trm_assets.harness.storage.records import BudgetLedger
from trm_assets.harness.storage.workspace import init_workspace
from trm_assets.llm.factory import build_providers
from trm_assets.llm.providers import Providers
from trm_assets.llm.sim.worker import SimWorkerProvider

REPO: Final = Path(__file__).resolve().parents[1]
SMOKE_CONFIG: Final = REPO / "data" / "configs" / "smoke.yaml"
# One epoch of the smoke configuration as it ships (≈ 1,100 rollouts, ≈ 4,300 model calls, ≈ 100
# barriers): concurrency 1 at 50 ms takes ≈ 4 minutes. `--config data/configs/default.yaml` measures
# the main job's epoch (≈ 5,900 rollouts; ≈ 20 minutes at concurrency 1). `--set` shrinks it.
EPOCH_OVERRIDES: Final[tuple[str, ...]] = ("epochs=1",)
# The epoch of the first measurement (2026-11-30; 144 rollouts, 12 barriers): the harness's fixed
# costs per unit and per barrier dominate it. `--small` reproduces it.
SMALL_EPOCH: Final[tuple[str, ...]] = (
    "val_size=24",
    "test_size=12",
    "eval_min_per_class=2",
    "batch_size=12",
    "steps_per_epoch=2",
    "gate_passes=4",
)
LATENCIES: Final[tuple[float, ...]] = (0.0, 50.0)
CONCURRENCIES: Final[tuple[int, ...]] = (1, 8, 32)
SENSOR_INTERVAL_S: Final = 5  # trm_assets/defs/sensors.py: epoch_sensor minimum_interval_seconds
_PATH_KEYS: Final = ("questions", "trees", "ground_truth")
Progress = Callable[[str], None]


# ------------------------------------------------------------------------------------------------
# configuration


def write_config(directory: Path, base: Path, overrides: Sequence[str]) -> Path:
    """A real YAML file (subprocesses read it) with absolute data paths and the overrides."""
    raw = read_yaml_config(base)  # a ConfigError naming the file, not a traceback
    for key in _PATH_KEYS:
        v = raw.get(key)
        if isinstance(v, str) and not Path(v).is_absolute():
            raw[key] = str(REPO / v)
    cfg = load_config_from(raw, overrides)
    path = directory / "bench-overhead.yaml"
    path.write_text(config_to_yaml(cfg), encoding="utf-8")
    return path


def load_config_from(raw: dict[str, Any], overrides: Sequence[str]) -> RunConfig:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.yaml"
        p.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return load_config(p, overrides, environ={}, dotenv_path=None)


def new_workspace(path: Path, cfg: RunConfig) -> Path:
    init_workspace(
        path,
        questions_ref=cfg.questions,
        config_yaml=config_to_yaml(cfg),
        config_fingerprint=cfg.fingerprint(),
    )
    return path


# ------------------------------------------------------------------------------------------------
# epoch wall time against the ideal


@dataclass
class BarrierLog(LoopObserver):
    """Model calls per barrier (one ``run_inference`` call = one barrier), watched through the
    loop's observer seam."""

    rollouts: list[tuple[int, ...]] = field(default_factory=list)  # calls per rollout, in order

    def add(self, res: InferenceResult) -> None:
        calls = [p.n_llm_calls for p in res.predictions]
        if calls:
            self.rollouts.append(tuple(calls))

    def on_barrier(self, result: InferenceResult) -> None:
        self.add(result)


def _other_calls(budget: BudgetLedger, scope: str) -> dict[str, int]:
    phases = budget.get(scope, {})
    names = ("diagnose", "evolve", "momentum", "system_tool")
    return {k: phases[k]["llm_calls"] if k in phases else 0 for k in names}


def _other_latencies(others: dict[str, int], steps: int, concurrency: int) -> int:
    diag = steps * math.ceil(others["diagnose"] / max(steps, 1) / concurrency)
    # a step's evolution calls are started together (docs/decision-evolve-prefetch.md): one
    # latency per step that has any (every step of the measured epochs has)
    evolve = min(others["evolve"], steps)
    gathered = (1 if others["momentum"] else 0) + (1 if others["system_tool"] else 0)
    return diag + evolve + gathered


def ideal_seconds(
    log: BarrierLog, others: dict[str, int], steps: int, latency_s: float, concurrency: int
) -> float:
    agent = sum(max(sum(calls) / concurrency, max(calls)) for calls in log.rollouts)
    return (agent + _other_latencies(others, steps, concurrency)) * latency_s


def makespan(calls: Sequence[int], concurrency: int) -> int:
    """Model-call latencies one barrier needs under the harness's own schedule with zero
    overhead: ``concurrency`` call slots taken first come, first served (a rollout's next call
    queues behind the calls already waiting), up to ``ROLLOUTS_PER_SLOT × concurrency`` rollouts
    under way, started in order, each rollout's calls one after another
    (:func:`~trm_assets.harness.loop.rollouts.run_inference`)."""
    left = list(calls)
    waiting = deque(i for i, c in enumerate(left) if c > 0)  # rollouts not started yet
    cap = concurrency * ROLLOUTS_PER_SLOT
    queue: deque[int] = deque()
    while waiting and len(queue) < cap:
        queue.append(waiting.popleft())
    under_way, ticks = len(queue), 0
    while queue:
        ticks += 1
        wave = [queue.popleft() for _ in range(min(concurrency, len(queue)))]
        for i in wave:
            left[i] -= 1
            if left[i] > 0:
                queue.append(i)
                continue
            under_way -= 1
            if waiting and under_way < cap:
                queue.append(waiting.popleft())
                under_way += 1
    return ticks


def schedule_seconds(
    log: BarrierLog, others: dict[str, int], steps: int, latency_s: float, concurrency: int
) -> float:
    """The zero-overhead time of the same schedule: every barrier's :func:`makespan`, plus the
    other model calls as in :func:`ideal_seconds`. ``wall / schedule`` isolates the harness's
    own time from the packing of rollouts' call chains into slots (``ideal`` ≤ ``schedule``)."""
    agent = sum(makespan(calls, concurrency) for calls in log.rollouts)
    return (agent + _other_latencies(others, steps, concurrency)) * latency_s


@dataclass(frozen=True)
class EpochCell:
    latency_ms: float
    concurrency: int
    wall_s: float
    ideal_s: float
    llm_calls: int
    barriers: int
    rollouts: int
    schedule_s: float = 0.0

    @property
    def ratio(self) -> float | None:
        return self.wall_s / self.ideal_s if self.ideal_s > 0 else None

    @property
    def ratio_schedule(self) -> float | None:
        return self.wall_s / self.schedule_s if self.schedule_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        r2 = self.ratio_schedule
        return {
            "latency_ms": self.latency_ms,
            "concurrency": self.concurrency,
            "wall_s": round(self.wall_s, 3),
            "ideal_s": round(self.ideal_s, 3),
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "schedule_s": round(self.schedule_s, 3),
            "ratio_schedule": None if r2 is None else round(r2, 4),
            "llm_calls": self.llm_calls,
            "barriers": self.barriers,
            "rollouts": self.rollouts,
        }


def bench_providers(cfg: RunConfig, *, sim_worker: bool) -> tuple[Providers, Callable[[], None]]:
    """The providers of a measured epoch and how to release them. With ``sim_worker`` the agent's
    world is computed in a worker process (:mod:`trm_assets.llm.sim.worker`), as a remote
    server's replies are: the simulator's CPU then no longer stalls the loop's other calls."""
    spec = cfg.provider_spec()
    providers = build_providers(spec)
    if not sim_worker or spec.kind != "sim" or not spec.ground_truth:
        return providers, lambda: None
    worker = SimWorkerProvider(spec.ground_truth, spec.sim, model=spec.agent_model)
    return dataclasses.replace(providers, agent=worker), worker.close


def epoch_cell(
    root: Path,
    base: Path,
    overrides: Sequence[str],
    latency_ms: float,
    concurrency: int,
    *,
    sim_worker: bool = True,
) -> EpochCell:
    cfg = load_config(
        base,
        (
            *overrides,
            f"sim.latency_ms_mean={latency_ms}",
            "sim.latency_ms_jitter=0",
            f"concurrency={concurrency}",
        ),
        environ={},
        dotenv_path=None,
    )
    ws = new_workspace(Path(tempfile.mkdtemp(prefix="ws-", dir=root)) / "ws", cfg)
    log = BarrierLog()
    providers, release = bench_providers(cfg, sim_worker=sim_worker)
    with loop_context(ws, cfg, providers) as ctx:
        run_action(ctx, current_action(ctx))  # init: untimed
        ctx.observers = (log,)
        t0 = time.perf_counter()
        while True:
            action = current_action(ctx)
            if action.kind != "step" and action.kind != "slow_update":
                break
            run_action(ctx, action, behind=True)  # as `trm train` runs units in a row
            if action.kind == "slow_update" and action.slow_step == 10:
                break
        wait_for_commits()  # the epoch's last checkpoint has landed
        wall = time.perf_counter() - t0
        state = load_state(ctx.paths.state, cfg)
    release()
    assert state is not None
    others = _other_calls(state.budget, "e0")
    calls = sum(map(sum, log.rollouts)) + sum(others.values())
    rollouts = sum(r["rollouts"] for r in state.budget.get("e0", {}).values())
    shutil.rmtree(ws.parent, ignore_errors=True)
    lat, steps = latency_ms / 1000.0, cfg.steps_per_epoch
    return EpochCell(
        latency_ms,
        concurrency,
        wall,
        ideal_seconds(log, others, steps, lat, concurrency),
        calls,
        len(log.rollouts),
        rollouts,
        schedule_seconds(log, others, steps, lat, concurrency),
    )


# ------------------------------------------------------------------------------------------------
# Dagster's added time per step


def _prepared(root: Path, cfg_path: Path, name: str) -> Path:
    """An initialized workspace (init done: the next unit is step e0 s0)."""
    cfg = load_config(cfg_path, (), environ={}, dotenv_path=None)
    ws = new_workspace(root / name, cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))
    return ws


def time_direct(ws: Path, cfg_path: Path) -> float:
    cfg = load_config(cfg_path, (), environ={}, dotenv_path=None)
    t0 = time.perf_counter()
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, Action("step", epoch=0, step=0))
    return time.perf_counter() - t0


def _home(root: Path) -> Path:
    home = Path(tempfile.mkdtemp(prefix="dagster-home-", dir=root))
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def time_in_process(ws: Path, cfg_path: Path, home: Path) -> float:
    import dagster as dg

    from trm_assets.defs.driver import execute_unit
    from trm_assets.defs.resources import TrmResource

    trm = TrmResource(workspace=str(ws), config_path=str(cfg_path))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        t0 = time.perf_counter()
        execute_unit(Action("step", epoch=0, step=0), trm, instance)
        return time.perf_counter() - t0


def time_launched(ws: Path, cfg_path: Path, home: Path, timeout_s: float = 300) -> dict[str, float]:
    """``dagster job launch`` of gate_step e0|s0 (DefaultRunCoordinator → DefaultRunLauncher: a
    new process loads the code location and executes the run); timed until the run's SUCCESS."""
    import dagster as dg
    import yaml

    from trm_assets.defs.experiments import experiment_name_for

    # the shipped instance queues runs (a daemon dequeues them): time the launch itself with the
    # DefaultRunCoordinator (the run starts at once in a new process)
    conf = yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8")) or {}
    conf["run_coordinator"] = {
        "module": "dagster.core.run_coordinator",
        "class": "DefaultRunCoordinator",
    }
    (home / "dagster.yaml").write_text(yaml.safe_dump(conf), encoding="utf-8")
    exp = experiment_name_for(ws)  # TRM_DAGSTER_WORKSPACE below adds this experiment
    job = f"{exp}__gate_step"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for name, key in ((f"{exp}__epochs", "e0"), (f"{exp}__steps", "s0")):
            if not instance.has_dynamic_partition(name, key):
                instance.add_dynamic_partitions(name, [key])
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home), TRM_DAGSTER_WORKSPACE=str(ws), TRM_DAGSTER_CONFIG=str(cfg_path)
    )
    tags = {
        "dagster/partition": "e0|s0",
        "dagster/partition/epoch": "e0",
        "dagster/partition/step": "s0",
    }
    dagster_bin = Path(sys.executable).parent / "dagster"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(dagster_bin), "job", "launch", "-j", job, "-w", "workspace.yaml",
         "--tags", json.dumps(tags)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    cli_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise click.ClickException(
            f"`dagster job launch -j {job}` failed (exit {proc.returncode}):\n"
            + proc.stderr[-2000:]
        )
    deadline = time.monotonic() + timeout_s
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while True:
            runs = instance.get_runs(dg.RunsFilter(job_name=job), limit=1)
            status = runs[0].status if runs else None
            if status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
                break
            if time.monotonic() > deadline:
                raise click.ClickException(f"launched gate_step run not finished in {timeout_s}s")
            time.sleep(0.05)
        total = time.perf_counter() - t0
        if status is not dg.DagsterRunStatus.SUCCESS:
            raise click.ClickException(f"launched gate_step run {runs[0].run_id} failed")
        stats = instance.get_run_stats(runs[0].run_id)
    exec_s = (
        stats.end_time - stats.start_time
        if stats.end_time is not None and stats.start_time is not None
        else float("nan")
    )
    return {"total_s": total, "cli_s": cli_s, "run_exec_s": exec_s}


def dagster_overhead(
    root: Path, cfg_path: Path, repeats: int, progress: Progress | None
) -> dict[str, Any]:
    direct: list[float] = []
    inproc: list[float] = []
    launched: list[dict[str, float]] = []
    for i in range(repeats):
        direct.append(time_direct(_prepared(root, cfg_path, f"d{i}"), cfg_path))
        inproc.append(time_in_process(_prepared(root, cfg_path, f"p{i}"), cfg_path, _home(root)))
        launched.append(time_launched(_prepared(root, cfg_path, f"l{i}"), cfg_path, _home(root)))
        if progress is not None:
            progress(
                f"dagster repeat {i + 1}/{repeats}: direct {direct[-1]:.2f}s, in-process "
                f"{inproc[-1]:.2f}s, launched {launched[-1]['total_s']:.2f}s"
            )
    md, mi = statistics.median(direct), statistics.median(inproc)
    ml = statistics.median(x["total_s"] for x in launched)
    return {
        "unit": "step (epoch 0, step 0)",
        "repeats": repeats,
        "direct_s": round(md, 3),
        "in_process_s": round(mi, 3),
        "launched_s": round(ml, 3),
        "launched_cli_s": round(statistics.median(x["cli_s"] for x in launched), 3),
        "launched_run_exec_s": round(statistics.median(x["run_exec_s"] for x in launched), 3),
        "added_in_process_s": round(mi - md, 3),
        "added_launched_s": round(ml - md, 3),
        "sensor_interval_s": SENSOR_INTERVAL_S,
        "samples": {
            "direct_s": [round(x, 3) for x in direct],
            "in_process_s": [round(x, 3) for x in inproc],
            "launched_s": [round(x["total_s"], 3) for x in launched],
        },
    }


# ------------------------------------------------------------------------------------------------
# CLI


@click.command("overhead")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=SMOKE_CONFIG,
    show_default=True,
    help="Base RunConfig (the SIMULATED world); one epoch of it is measured.",
)
@click.option("--set", "overrides", multiple=True, help="A RunConfig override key=value.")
@click.option(
    "--latency-ms",
    "latencies",
    type=click.FloatRange(min=0),
    multiple=True,
    help="Simulated latency per model call (repeatable; default 0 and 50).",
)
@click.option(
    "--concurrency",
    "concurrencies",
    type=click.IntRange(min=1),
    multiple=True,
    help="Concurrency (repeatable; default 1, 8 and 32).",
)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repeats of each Dagster mode (medians reported).")  # fmt: skip
@click.option("--skip-dagster", is_flag=True, help="Only the epoch table.")
@click.option(
    "--small", is_flag=True, help="The first measurement's epoch (144 rollouts; fixed costs rule)."
)
@click.option(
    "--sim-in-process",
    is_flag=True,
    help="Compute the simulated agent in the loop's own process (its CPU then stalls the "
    "loop's other calls); default: in a worker process, as a remote server's.",
)
def cli(
    as_json: bool,
    config_path: Path,
    overrides: tuple[str, ...],
    latencies: tuple[float, ...],
    concurrencies: tuple[int, ...],
    repeats: int,
    skip_dagster: bool,
    small: bool,
    sim_in_process: bool,
) -> None:
    """Epoch wall time vs the ideal under the block barriers; Dagster's added time per step."""
    progress: Progress = lambda m: click.echo(m, err=True)  # noqa: E731
    ovr = (*EPOCH_OVERRIDES, *(SMALL_EPOCH if small else ()), *overrides)
    started = time.perf_counter()
    cells: list[EpochCell] = []
    with tempfile.TemporaryDirectory(prefix="trm-bench-overhead-") as tmp:
        root = Path(tmp)
        try:
            cfg_path = write_config(root, config_path, ovr)
        except TrmError as e:
            raise click.UsageError(str(e)) from None
        for lat in latencies or LATENCIES:
            for conc in concurrencies or CONCURRENCIES:
                cell = epoch_cell(root, cfg_path, (), lat, conc, sim_worker=not sim_in_process)
                cells.append(cell)
                progress(
                    f"epoch latency {lat:g} ms × concurrency {conc}: wall {cell.wall_s:.2f}s, "
                    f"ideal {cell.ideal_s:.2f}s, schedule {cell.schedule_s:.2f}s"
                )
        dag = None if skip_dagster else dagster_overhead(root, cfg_path, repeats, progress)
    out = {
        "epoch": [c.to_dict() for c in cells],
        "dagster": dag,
        "meta": {
            "config": str(config_path),
            "overrides": list(ovr),
            "wall_s": round(time.perf_counter() - started, 1),
            "cpus": os.cpu_count(),
            "simulated": True,
            "sim": "in-process" if sim_in_process else "worker",
        },
    }
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(
        "| latency | concurrency | wall_s | ideal_s | ratio | schedule_s | wall / schedule "
        "| model calls | barriers |"
    )
    click.echo("|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        r = "n/a" if c.ratio is None else f"{c.ratio:.3f}"
        r2 = "n/a" if c.ratio_schedule is None else f"{c.ratio_schedule:.3f}"
        click.echo(
            f"| {c.latency_ms:g} ms | {c.concurrency} | {c.wall_s:.2f} | {c.ideal_s:.2f} | {r} | "
            f"{c.schedule_s:.2f} | {r2} | {c.llm_calls} | {c.barriers} |"
        )
    if dag is not None:
        click.echo(
            f"\nDagster, {dag['unit']} (median of {dag['repeats']}): direct {dag['direct_s']}s, "
            f"execute_in_process {dag['in_process_s']}s (+{dag['added_in_process_s']}s), "
            f"dagster job launch {dag['launched_s']}s (+{dag['added_launched_s']}s; "
            f"plus the sensor interval ≤ {dag['sensor_interval_s']}s)"
        )
