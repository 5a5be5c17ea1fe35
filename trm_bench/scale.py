"""``trm bench scale``: does the harness scale linearly, and is the lineage query fast at 1M rows?

**1× against 10× questions.** Two SIMULATED samples written by the generator with the same seed
and parameters (``trm data synth``), sized to N and 10·N questions, each run once through the real
evaluation path: load the questions and their trees, :func:`run_inference` with a real
:class:`RunLog` file in a temporary directory (batched writes, ``finish_run``), then the reads that
follow an evaluation (:func:`per_task_accuracy` through a read-only connection, the run's
``runs`` row). The simulated provider answers at latency 0, so the wall time is the harness's own
work and any super-linear cost shows in ``ratio = wall(10·N) / wall(N)`` (target ≤ 10.5). Loading
the simulator's hidden ground truth is the model's side, not the harness's: untimed. A small run
warms imports and DuckDB first; the two sizes alternate over ``--repeats`` and medians are
compared.

**Lineage query.** A run-log file created through :class:`RunLog` (the real DDL) holds
1,000,000 synthetic prediction rows over 200 evaluation runs (bulk-inserted from one pandas
frame); each run's ``runs`` row names the skills version it evaluated, and those versions are
real version directories written by :func:`write_version` in a temporary store. The query —
accuracy per (run, task type) → the run's skills version → the content hash of that task type's
skill file in that version — reads the hashes from the versions' ``_meta.json``
(:func:`read_meta`) and joins them in the same SQL statement as list parameters
(``docs/decision-bench-scale.md``). Every answer is checked against the planted ground truth
(exact correct/scored counts per run and task type, the version of each run, the hash of each
version's file), so a wrong query fails the benchmark instead of timing it.

Why it is long: the scale bench builds its own synthetic 10x data and 1M-row run log and verifies
answers against the planted truth.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import click
import duckdb
import numpy as np
import pandas as pd

from trm_assets.domain.question import LETTERS, skill_file_name
from trm_assets.evolution.types import text_hash
from trm_assets.harness.data.questions import load_questions
from trm_assets.harness.reports.lineage import per_task_accuracy
from trm_assets.harness.storage.runlog import PREDICTION_COLUMNS, RunLog, RunLogReader
from trm_assets.harness.storage.versions import read_meta, write_version
from trm_assets.llm.sim import catalogue
from trm_assets.llm.sim.generator import synthesize
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.world import load_world
from trm_assets.llm.sim_config import SimConfig
from trm_bench.inference import DEFAULT_PROMPTS, BenchAgent, trees_for

RATIO_TARGET: Final = 10.5
QUERY_TARGET_MS: Final = 200.0
SCALE_FACTOR: Final = 10
QUESTIONS_PER_VIDEO: Final = 3  # the generator's default (data/default uses it)
INFRA_RATE: Final = 0.01  # share of synthetic rows that are infra failures (correct IS NULL)
Progress = Callable[[str], None]


class ScaleBenchError(click.ClickException):
    """The benchmark measured something wrong (a query answer or a read that disagrees with
    what was written): a bug to fix, never a number to report."""


# ------------------------------------------------------------------------------------------------
# 1× against 10× questions


def synth_sample(root: Path, n_questions: int, seed: int) -> Path:
    """A SIMULATED sample with at least ``n_questions`` questions (``trm data synth`` with the
    same seed and parameters for every size, so only the size differs)."""
    videos = math.ceil(n_questions / QUESTIONS_PER_VIDEO)
    out = root / f"sample-{n_questions}"
    synthesize(out, videos=videos, seed=seed, questions_per_video=QUESTIONS_PER_VIDEO)
    return out


@dataclass(frozen=True)
class SizeRun:
    """One timed evaluation of ``questions`` questions (seconds per stage)."""

    questions: int
    llm_calls: int
    accuracy: float | None
    load_s: float  # questions + their trees
    inference_s: float  # run_inference with the run log (batched writes, finish_run)
    reads_s: float  # per-task accuracy and the runs row, read-only

    @property
    def wall_s(self) -> float:
        return self.load_s + self.inference_s + self.reads_s

    @property
    def rollouts_per_s(self) -> float:
        return self.questions / self.wall_s if self.wall_s > 0 else float("inf")


def time_evaluation(
    data_dir: Path,
    n_questions: int,
    *,
    work_dir: Path,
    prompts_dir: Path = DEFAULT_PROMPTS,
    concurrency: int = 32,
    max_steps: int = 8,
    run_id: str = "bench_scale",
) -> SizeRun:
    """Evaluate the first ``n_questions`` questions of ``data_dir`` as the loop does; the run log
    is a new DuckDB file under ``work_dir``. The reads are checked against the in-memory result."""
    world = load_world(data_dir / "ground_truth.json")  # the model's side: untimed
    llm = SimulatedProvider(world, SimConfig(latency_ms_mean=0.0, latency_ms_jitter=0.0))
    agent = BenchAgent.load(prompts_dir, max_steps)
    db = Path(tempfile.mkdtemp(prefix="runlog-", dir=work_dir)) / "runs.duckdb"

    t0 = time.perf_counter()
    questions = load_questions(data_dir / "questions.json")
    if n_questions > len(questions):
        raise click.UsageError(f"{data_dir} has {len(questions)} questions, {n_questions} asked")
    questions = questions[:n_questions]
    trees = trees_for(data_dir, questions)
    t1 = time.perf_counter()
    with RunLog.open(db) as log:
        res = agent.run(
            questions, trees, llm, log, run_id=run_id, concurrency=concurrency, run_kind="bench"
        )
    t2 = time.perf_counter()
    per_task = per_task_accuracy(db, run_id)
    with RunLogReader.open(db) as reader:
        run_row = reader.run(run_id)
    t3 = time.perf_counter()

    expected = {
        t: (s.n - s.n_infra, s.accuracy) for t, s in res.by_task_type().items() if s.n > s.n_infra
    }
    got = {t: (v["n"], v["accuracy"]) for t, v in per_task.items()}
    if got != expected:
        raise ScaleBenchError(f"{db}: per-task accuracy read back {got}, in memory {expected}")
    if run_row is None or run_row["n_rollouts"] != n_questions:
        raise ScaleBenchError(f"{db}: runs row of {run_id} is {run_row}, {n_questions} expected")
    return SizeRun(
        questions=n_questions,
        llm_calls=sum(p.n_llm_calls for p in res.predictions),
        accuracy=res.accuracy,
        load_s=t1 - t0,
        inference_s=t2 - t1,
        reads_s=t3 - t2,
    )


@dataclass(frozen=True)
class QuestionsScale:
    runs_1x: tuple[SizeRun, ...]
    runs_10x: tuple[SizeRun, ...]
    concurrency: int
    max_steps: int

    @property
    def wall_1x_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs_1x)

    @property
    def wall_10x_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs_10x)

    @property
    def ratio(self) -> float:
        return self.wall_10x_s / self.wall_1x_s

    @property
    def met(self) -> bool:
        return self.ratio <= RATIO_TARGET

    def to_dict(self) -> dict[str, Any]:
        one, ten = self.runs_1x, self.runs_10x

        def stages(runs: Sequence[SizeRun]) -> dict[str, float]:
            return {
                k: round(statistics.median(getattr(r, k) for r in runs), 4)
                for k in ("load_s", "inference_s", "reads_s")
            }

        return {
            "n_1x": one[0].questions,
            "n_10x": ten[0].questions,
            "wall_1x_s": round(self.wall_1x_s, 4),
            "wall_10x_s": round(self.wall_10x_s, 4),
            "ratio": round(self.ratio, 4),
            "target": RATIO_TARGET,
            "met": self.met,
            "rollouts_per_s_1x": round(one[0].questions / self.wall_1x_s, 1),
            "rollouts_per_s_10x": round(ten[0].questions / self.wall_10x_s, 1),
            "llm_calls_1x": one[0].llm_calls,
            "llm_calls_10x": ten[0].llm_calls,
            "accuracy_1x": one[0].accuracy,
            "accuracy_10x": ten[0].accuracy,
            "stages_1x": stages(one),
            "stages_10x": stages(ten),
            "repeats": len(one),
            "concurrency": self.concurrency,
            "max_steps": self.max_steps,
            "latency_ms": 0.0,
            "samples": {
                "wall_1x_s": [round(r.wall_s, 4) for r in one],
                "wall_10x_s": [round(r.wall_s, 4) for r in ten],
            },
        }


def questions_scale(
    n_questions: int,
    *,
    root: Path,
    seed: int,
    repeats: int = 3,
    concurrency: int = 32,
    max_steps: int = 8,
    prompts_dir: Path = DEFAULT_PROMPTS,
    progress: Progress | None = None,
) -> QuestionsScale:
    """N and 10·N questions, alternated ``repeats`` times after an untimed warm-up."""
    small = synth_sample(root, n_questions, seed)
    large = synth_sample(root, SCALE_FACTOR * n_questions, seed)
    kw: dict[str, Any] = {
        "work_dir": root,
        "prompts_dir": prompts_dir,
        "concurrency": concurrency,
        "max_steps": max_steps,
    }
    time_evaluation(small, min(n_questions, 50), **kw)  # warm-up: imports, DuckDB, caches
    one: list[SizeRun] = []
    ten: list[SizeRun] = []
    for i in range(repeats):
        one.append(time_evaluation(small, n_questions, **kw))
        ten.append(time_evaluation(large, SCALE_FACTOR * n_questions, **kw))
        if progress is not None:
            progress(
                f"questions repeat {i + 1}/{repeats}: {n_questions} in {one[-1].wall_s:.2f}s, "
                f"{SCALE_FACTOR * n_questions} in {ten[-1].wall_s:.2f}s "
                f"(ratio {ten[-1].wall_s / one[-1].wall_s:.2f})"
            )
    return QuestionsScale(tuple(one), tuple(ten), concurrency, max_steps)


# ------------------------------------------------------------------------------------------------
# lineage query over synthetic predictions


@dataclass(frozen=True)
class LineageTruth:
    """What was planted: the query must return exactly this."""

    task_types: tuple[str, ...]
    run_versions: dict[str, str]  # run_id -> skills version
    hashes: dict[tuple[str, str], str]  # (version, task type) -> hash of its skill file text
    counts: dict[tuple[str, str], tuple[int, int]]  # (run_id, task type) -> (scored, correct)


@dataclass(frozen=True)
class LineageRow:
    run_id: str
    task_type: str
    n: int  # rollouts with an outcome (infra failures excluded, as per_task_accuracy does)
    n_correct: int
    accuracy: float | None
    skills_version: str
    skill_file: str
    content_hash: str


def write_skill_versions(
    store_root: Path, task_types: Sequence[str], n_versions: int, rng: np.random.Generator
) -> dict[str, dict[str, str]]:
    """``v1`` … ``vN`` of a skills directory, each changing one file of its parent (as an
    accepted edit does); returns every version's files."""
    files = {
        skill_file_name(t): f"# {t}\n\n- Read the question and the options first.\n"
        for t in task_types
    }
    names = sorted(files)
    out: dict[str, dict[str, str]] = {}
    parent: str | None = None
    for i in range(n_versions):
        if parent is not None:
            name = names[int(rng.integers(len(names)))]
            files = {**files, name: files[name] + f"- Edit {i}: check {rng.integers(10**6)}.\n"}
        meta = write_version(store_root, files, parent=parent, reason="bench scale")
        out[meta.version] = dict(files)
        parent = meta.version
    return out


def synthetic_predictions(
    run_ids: Sequence[str],
    rows_per_run: int,
    task_types: Sequence[str],
    rng: np.random.Generator,
) -> tuple[pd.DataFrame, dict[tuple[str, str], tuple[int, int]]]:
    """Prediction rows (the run-log columns) with a planted accuracy per (run, task type):
    exactly ``round(p · scored)`` correct rows, ``p`` uniform in [0.25, 0.9]."""
    weights = np.array([catalogue.TASK_TYPE_WEIGHTS[t] for t in task_types], dtype=float)
    task_of_q = rng.choice(len(task_types), size=rows_per_run, p=weights / weights.sum())
    truth_of_q = rng.integers(4, size=rows_per_run)
    n_runs = len(run_ids)
    correct = np.zeros((n_runs, rows_per_run), dtype=bool)
    infra = rng.random((n_runs, rows_per_run)) < INFRA_RATE
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for r, run_id in enumerate(run_ids):
        for t, task_type in enumerate(task_types):
            scored = np.flatnonzero((task_of_q == t) & ~infra[r])
            if scored.size == 0:
                continue
            k = round(float(rng.uniform(0.25, 0.9)) * scored.size)
            correct[r, rng.choice(scored, size=k, replace=False)] = True
            counts[(run_id, task_type)] = (int(scored.size), k)
    ok, lost = correct.ravel(), infra.ravel()  # one value per row, runs one after another
    truth = np.tile(truth_of_q, n_runs)
    wrong = (truth + 1 + rng.integers(3, size=truth.size)) % 4
    letters = np.array(LETTERS[:4], dtype=object)
    qids = np.array([f"q{j:06d}" for j in range(rows_per_run)], dtype=object)
    vids = np.array([f"vid{j // 3:06d}" for j in range(rows_per_run)], dtype=object)
    tt_names = np.array(list(task_types), dtype=object)
    n = truth.size
    null = np.full(n, None, dtype=object)
    frame = pd.DataFrame(
        {
            "run_id": np.repeat(np.array(list(run_ids), dtype=object), rows_per_run),
            "question_id": np.tile(qids, n_runs),
            "replicate": np.zeros(n, dtype=np.int32),
            "video_id": np.tile(vids, n_runs),
            "task_type": np.tile(tt_names[task_of_q], n_runs),
            "duration": np.tile(np.array(["short", "medium", "long"])[task_of_q % 3], n_runs),
            "truth": letters[truth],
            "predicted": np.where(lost, null, np.where(ok, letters[truth], letters[wrong])),
            "correct": pd.array(np.where(lost, null, ok), dtype="boolean"),
            "stop_reason": np.where(lost, "error", "answer"),
            "failure_kind": np.where(lost, "infra", np.where(ok, null, "task")),
            "n_llm_calls": rng.integers(1, 9, size=n, dtype=np.int32),
            "n_tool_calls": rng.integers(0, 8, size=n, dtype=np.int32),
            "prompt_tokens": rng.integers(500, 6000, size=n),
            "completion_tokens": rng.integers(20, 400, size=n),
            "latency_s": rng.random(n) * 5,
            "seed": rng.integers(2**62, size=n),
            "model": "sim-videomme-1",
        }
    )
    return frame, counts


def rows_per_run(n_rows: int, n_runs: int) -> int:
    if n_rows % n_runs:
        raise click.UsageError(
            f"--lineage-rows {n_rows} is not a multiple of --lineage-runs {n_runs}"
        )
    return n_rows // n_runs


def build_lineage_db(
    db: Path,
    store_root: Path,
    *,
    n_rows: int,
    n_runs: int,
    n_versions: int,
    rng: np.random.Generator,
    task_types: Sequence[str] = catalogue.TASK_TYPES,
) -> LineageTruth:
    """The run log (real DDL through :class:`RunLog`) and the skills store of the query."""
    per_run = rows_per_run(n_rows, n_runs)
    versions = write_skill_versions(store_root, task_types, n_versions, rng)
    names = list(versions)
    run_ids = [f"scale_eval_r{i:04d}" for i in range(n_runs)]
    # Runs in training order: each version is evaluated by a consecutive block of runs.
    run_versions = {r: names[i * n_versions // n_runs] for i, r in enumerate(run_ids)}
    frame, counts = synthetic_predictions(run_ids, per_run, task_types, rng)
    cols = [c for c in PREDICTION_COLUMNS if c in frame.columns]
    with RunLog.open(db) as log:
        for run_id, version in run_versions.items():
            log.begin_run(
                run_id,
                kind="eval",
                model="sim-videomme-1",
                is_simulated=True,
                skills_version=version,
                prompts_version="v1",
            )
        with log.transaction() as con:
            con.register("_bench_predictions", frame[cols])
            try:
                con.execute(
                    f"INSERT INTO predictions ({', '.join(cols)}) "
                    f"SELECT {', '.join(cols)} FROM _bench_predictions"
                )
            finally:
                con.unregister("_bench_predictions")
        for run_id in run_ids:
            log.finish_run(run_id)
    return LineageTruth(
        task_types=tuple(task_types),
        run_versions=run_versions,
        hashes={
            (v, t): text_hash(files[skill_file_name(t)])
            for v, files in versions.items()
            for t in task_types
        },
        counts=counts,
    )


_LINEAGE_SQL = """
WITH skill_hash AS (
    SELECT unnest(?::VARCHAR[]) AS skills_version, unnest(?::VARCHAR[]) AS task_type,
           unnest(?::VARCHAR[]) AS skill_file, unnest(?::VARCHAR[]) AS content_hash
), per_task AS (
    SELECT run_id, task_type,
           count(*) FILTER (WHERE correct IS NOT NULL) AS n,
           count(*) FILTER (WHERE correct) AS n_correct
    FROM predictions {where}
    GROUP BY run_id, task_type
)
SELECT p.run_id, p.task_type, p.n, p.n_correct,
       CASE WHEN p.n > 0 THEN p.n_correct / p.n END AS accuracy,
       r.skills_version, h.skill_file, h.content_hash
FROM per_task p
JOIN runs r USING (run_id)
LEFT JOIN skill_hash h ON h.skills_version = r.skills_version AND h.task_type = p.task_type
ORDER BY p.run_id, p.task_type
"""


def lineage_query(
    reader: RunLogReader,
    skills_root: Path,
    task_types: Sequence[str],
    run_id: str | None = None,
) -> list[LineageRow]:
    """Accuracy per task type of one run (or of every run) → the run's skills version → the
    content hash of that task type's skill file, as recorded in the version's ``_meta.json``."""
    where, params = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
    versions = reader.query(
        f"SELECT DISTINCT run_id, skills_version FROM runs {where} ORDER BY run_id", params
    )
    missing = [r["run_id"] for r in versions if r["skills_version"] is None]
    if missing:
        raise ScaleBenchError(f"{reader.path}: run(s) {missing[:5]} record no skills_version")
    cols: tuple[list[str], list[str], list[str], list[str]] = ([], [], [], [])
    for version in sorted({r["skills_version"] for r in versions}):
        files = read_meta(skills_root, version).files
        for task_type in task_types:
            name = skill_file_name(task_type)
            if name not in files:
                raise ScaleBenchError(f"{skills_root / version}: no {name} ({task_type!r})")
            for col, value in zip(cols, (version, task_type, name, files[name]), strict=True):
                col.append(value)
    rows = reader.query(_LINEAGE_SQL.format(where=where), [*cols, *params])
    return [LineageRow(**r) for r in rows]


def check_lineage(rows: Sequence[LineageRow], truth: LineageTruth, run_id: str | None) -> None:
    """Raise unless ``rows`` are exactly the planted counts, versions and hashes."""
    want = {k: v for k, v in truth.counts.items() if run_id is None or k[0] == run_id}
    got = {(r.run_id, r.task_type): r for r in rows}
    if set(got) != set(want) or len(got) != len(rows):
        extra, lost = sorted(set(got) - set(want))[:3], sorted(set(want) - set(got))[:3]
        raise ScaleBenchError(f"lineage query: unexpected (run, task) rows {extra}, missing {lost}")
    for key, (n, k) in want.items():
        r = got[key]
        version = truth.run_versions[r.run_id]
        expected = (n, k, version, truth.hashes[(version, r.task_type)])
        if (r.n, r.n_correct, r.skills_version, r.content_hash) != expected or (
            r.accuracy is None or abs(r.accuracy - k / n) > 1e-12
        ):
            raise ScaleBenchError(f"lineage query: {r} disagrees with the planted {expected}")


@dataclass
class LineageBench:
    rows: int
    runs: int
    versions: int
    build_s: float
    db_mb: float
    result_rows: int
    one_run: str
    samples_ms: dict[str, list[float]] = field(default_factory=dict)

    def median_ms(self, key: str) -> float:
        return statistics.median(self.samples_ms[key])

    @property
    def query_ms(self) -> float:
        return self.median_ms("all_runs_cold")

    @property
    def met(self) -> bool:
        return self.query_ms < QUERY_TARGET_MS

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "runs": self.runs,
            "versions": self.versions,
            "result_rows": self.result_rows,
            "query_ms": round(self.query_ms, 2),
            "query_ms_warm": round(self.median_ms("all_runs_warm"), 2),
            "one_run_ms": round(self.median_ms("one_run_cold"), 2),
            "one_run_ms_warm": round(self.median_ms("one_run_warm"), 2),
            "target_ms": QUERY_TARGET_MS,
            "met": self.met,
            "verified": True,
            "build_s": round(self.build_s, 2),
            "db_mb": round(self.db_mb, 1),
            "repeats": len(self.samples_ms["all_runs_cold"]),
            "samples_ms": {k: [round(x, 2) for x in v] for k, v in self.samples_ms.items()},
        }


def lineage_bench(
    root: Path,
    *,
    n_rows: int,
    n_runs: int,
    n_versions: int,
    repeats: int,
    rng: np.random.Generator,
    progress: Progress | None = None,
) -> LineageBench:
    """Build, then time the query for every run and for one run: *cold* = open a read-only
    reader, query, close (what a Dagster asset does); *warm* = again on an open reader."""
    db, skills_root = root / "lineage" / "runs.duckdb", root / "lineage" / "skills"
    t0 = time.perf_counter()
    truth = build_lineage_db(
        db, skills_root, n_rows=n_rows, n_runs=n_runs, n_versions=n_versions, rng=rng
    )
    build_s = time.perf_counter() - t0
    if progress is not None:
        progress(f"lineage: {n_rows} rows over {n_runs} runs built in {build_s:.1f}s")
    run_ids = sorted(truth.run_versions)
    one_run = run_ids[int(rng.integers(len(run_ids)))]
    samples: dict[str, list[float]] = {}
    for label, run_id in (("all_runs", None), ("one_run", one_run)):
        cold, warm = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            with RunLogReader.open(db) as reader:
                rows = lineage_query(reader, skills_root, truth.task_types, run_id)
            cold.append((time.perf_counter() - t) * 1000)
            check_lineage(rows, truth, run_id)
        with RunLogReader.open(db) as reader:
            for _ in range(repeats):
                t = time.perf_counter()
                rows = lineage_query(reader, skills_root, truth.task_types, run_id)
                warm.append((time.perf_counter() - t) * 1000)
                check_lineage(rows, truth, run_id)
        samples[f"{label}_cold"], samples[f"{label}_warm"] = cold, warm
    return LineageBench(
        rows=n_rows,
        runs=n_runs,
        versions=n_versions,
        build_s=build_s,
        db_mb=db.stat().st_size / 1e6,
        result_rows=len(truth.counts),
        one_run=one_run,
        samples_ms=samples,
    )


# ------------------------------------------------------------------------------------------------
# CLI


def _meta(seed: int, load_before: float) -> dict[str, Any]:
    return {
        "simulated": True,
        "seed": seed,
        "cpus": os.cpu_count(),
        "load_1m_before": round(load_before, 2),
        "load_1m_after": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
    }


def _markdown(q: dict[str, Any], lin: dict[str, Any]) -> list[str]:
    def verdict(met: bool) -> str:
        return "**met**" if met else "**MISSED**"

    return [
        "| measure | value | target | |",
        "|---|---|---|---|",
        f"| {q['n_1x']} questions | {q['wall_1x_s']:.2f} s ({q['rollouts_per_s_1x']:.0f}/s) | | |",
        f"| {q['n_10x']} questions | {q['wall_10x_s']:.2f} s "
        f"({q['rollouts_per_s_10x']:.0f}/s) | | |",
        f"| time ratio 10×/1× | {q['ratio']:.2f} | ≤ {q['target']} | {verdict(q['met'])} |",
        f"| lineage query, all runs ({lin['rows']:,} rows) | {lin['query_ms']:.1f} ms "
        f"(warm {lin['query_ms_warm']:.1f}) | < {lin['target_ms']:g} ms | {verdict(lin['met'])} |",
        f"| lineage query, one run | {lin['one_run_ms']:.1f} ms "
        f"(warm {lin['one_run_ms_warm']:.1f}) | | |",
    ]


@click.command("scale")
@click.option(
    "--questions",
    "n_questions",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="N: the 1× size (the 10× size is 10·N).",
)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--lineage-rows", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--lineage-runs", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--lineage-versions", type=click.IntRange(min=1), default=25, show_default=True)
@click.option("--query-repeats", type=click.IntRange(min=1), default=7, show_default=True)
@click.option("--seed", type=int, default=2026, show_default=True, help="Seed of every draw.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")
def cli(
    n_questions: int,
    repeats: int,
    concurrency: int,
    max_steps: int,
    lineage_rows: int,
    lineage_runs: int,
    lineage_versions: int,
    query_repeats: int,
    seed: int,
    as_json: bool,
) -> None:
    """1× against 10× questions (time ratio) and the lineage query over synthetic predictions."""
    rows_per_run(lineage_rows, lineage_runs)  # refuse a bad split before the long part
    load_before = os.getloadavg()[0]

    def progress(msg: str) -> None:
        click.echo(msg, err=True)

    with tempfile.TemporaryDirectory(prefix="trm-bench-scale-") as tmp:
        root = Path(tmp)
        q = questions_scale(
            n_questions,
            root=root,
            seed=seed,
            repeats=repeats,
            concurrency=concurrency,
            max_steps=max_steps,
            progress=progress,
        ).to_dict()
        lin = lineage_bench(
            root,
            n_rows=lineage_rows,
            n_runs=lineage_runs,
            n_versions=lineage_versions,
            repeats=query_repeats,
            rng=np.random.default_rng(seed),
            progress=progress,
        ).to_dict()
    out = {"questions": q, "lineage": lin, "meta": _meta(seed, load_before)}
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(
        f"SIMULATED model at 0 ms/call, concurrency {concurrency}, median of {repeats}; "
        f"lineage median of {query_repeats} (cold = open reader + query)"
    )
    for line in _markdown(q, lin):
        click.echo(line)
