"""``trm bench inference``: throughput of :func:`run_inference` against the simulated model.

The SIMULATED provider sleeps a fixed latency per model call, so the ideal wall time of a run is
``Σ simulated latency / concurrency`` (every call's latency overlapped perfectly). The benchmark
reports the measured wall time, that ideal, their ratio (harness overhead + tail effects; ``null``
when the latency is 0) and rollouts per second. The run log is a real DuckDB file in a temporary
directory, so batched writes are part of the measurement.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from trm_assets.agent.messages import AgentPrompts, load_agent_prompts
from trm_assets.agent.tools import Toolbox
from trm_assets.agent.tree import VideoTree, load_tree
from trm_assets.domain.question import Question
from trm_assets.harness.data.questions import load_questions
from trm_assets.harness.loop.rollouts import InferenceResult, run_inference
from trm_assets.harness.storage.runlog import RunLog
from trm_assets.llm.protocol import LLMProvider
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.world import load_world
from trm_assets.llm.sim_config import SimConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "data" / "default"
DEFAULT_PROMPTS = REPO / "prompts"


@dataclass(frozen=True)
class InferenceBench:
    questions: int
    latency_ms: float
    concurrency: int
    llm_calls: int
    wall_s: float
    ideal_s: float
    accuracy: float | None

    @property
    def ratio(self) -> float | None:
        return self.wall_s / self.ideal_s if self.ideal_s > 0 else None

    @property
    def rollouts_per_s(self) -> float:
        return self.questions / self.wall_s if self.wall_s > 0 else float("inf")


def trees_for(data_dir: Path, questions: list[Question]) -> dict[str, VideoTree]:
    """The trees of ``questions`` from a sample directory (``trees/<key>.json``)."""
    return {
        key: load_tree(data_dir / "trees" / f"{key}.json")
        for key in sorted({q.tree_key for q in questions})
    }


@dataclass(frozen=True)
class BenchAgent:
    """The agent the benchmarks run: a prompt set's skills (``skills/*.md`` by file name) and
    agent prompts, and the step limit of a rollout."""

    skills: dict[str, str]
    prompts: AgentPrompts
    max_steps: int

    @classmethod
    def load(cls, prompts_dir: Path, max_steps: int) -> BenchAgent:
        skills = {
            p.name: p.read_text(encoding="utf-8") for p in (prompts_dir / "skills").glob("*.md")
        }
        return cls(skills, load_agent_prompts(prompts_dir), max_steps)

    def run(
        self,
        questions: list[Question],
        trees: dict[str, VideoTree],
        llm: LLMProvider,
        log: RunLog | None,
        *,
        run_id: str,
        concurrency: int,
        run_kind: str | None = None,
    ) -> InferenceResult:
        """``run_inference`` of ``questions`` with ``trees`` as the toolbox."""
        return asyncio.run(
            run_inference(
                questions,
                llm=llm,
                tools=Toolbox(trees),
                log=log,
                run_id=run_id,
                concurrency=concurrency,
                max_steps=self.max_steps,
                skills=self.skills,
                prompts=self.prompts,
                run_kind=run_kind,
            )
        )


def _pick_questions(data_dir: Path, n: int) -> list[Question]:
    qs = load_questions(data_dir / "questions.json")
    if n > len(qs):
        raise click.UsageError(f"--questions {n}: {data_dir} has only {len(qs)} questions")
    return qs[:n]


def run_bench(
    n_questions: int,
    latency_ms: float,
    concurrency: int,
    *,
    data_dir: Path = DEFAULT_DATA,
    prompts_dir: Path = DEFAULT_PROMPTS,
    max_steps: int = 8,
    with_log: bool = True,
) -> InferenceBench:
    """One benchmark run (questions from ``data_dir``, skills and prompts from ``prompts_dir``)."""
    questions = _pick_questions(data_dir, n_questions)
    trees = trees_for(data_dir, questions)
    agent = BenchAgent.load(prompts_dir, max_steps)
    world = load_world(data_dir / "ground_truth.json")
    llm = SimulatedProvider(world, SimConfig(latency_ms_mean=latency_ms, latency_ms_jitter=0.0))
    with tempfile.TemporaryDirectory(prefix="trm-bench-") as tmp:
        log = RunLog.open(Path(tmp) / "runs.duckdb") if with_log else None
        try:
            t0 = time.perf_counter()
            res = agent.run(
                questions, trees, llm, log, run_id="bench_inference", concurrency=concurrency
            )
            wall = time.perf_counter() - t0
        finally:
            if log is not None:
                log.close()
    calls = sum(p.n_llm_calls for p in res.predictions)
    return InferenceBench(
        questions=n_questions,
        latency_ms=latency_ms,
        concurrency=concurrency,
        llm_calls=calls,
        wall_s=wall,
        ideal_s=calls * latency_ms / 1000.0 / concurrency,
        accuracy=res.accuracy,
    )


@click.command("inference")
@click.option(
    "--questions", "n_questions", type=click.IntRange(min=1), default=500, show_default=True
)
@click.option("--latency-ms", type=click.FloatRange(min=0), default=50.0, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=DEFAULT_DATA,
    show_default=True,
    help="A simulated sample (questions.json, trees/, ground_truth.json).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")
def cli(
    n_questions: int,
    latency_ms: float,
    concurrency: int,
    max_steps: int,
    data_dir: Path,
    as_json: bool,
) -> None:
    """Throughput of run_inference with the SIMULATED model (wall time vs the ideal)."""
    b = run_bench(n_questions, latency_ms, concurrency, data_dir=data_dir, max_steps=max_steps)
    out = {
        "wall_s": round(b.wall_s, 4),
        "ideal_s": round(b.ideal_s, 4),
        "ratio": round(b.ratio, 4) if b.ratio is not None else None,
        "rollouts_per_s": round(b.rollouts_per_s, 2),
    }
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(
        f"SIMULATED model, {b.questions} questions, latency {b.latency_ms:g} ms/call, "
        f"concurrency {b.concurrency}, {b.llm_calls} model calls"
    )
    click.echo(f"  wall time      {b.wall_s:9.3f} s")
    click.echo(f"  ideal          {b.ideal_s:9.3f} s   (Σ simulated latency / concurrency)")
    click.echo(f"  ratio          {'n/a' if b.ratio is None else f'{b.ratio:9.3f}'}")
    click.echo(f"  rollouts/s     {b.rollouts_per_s:9.1f}")
