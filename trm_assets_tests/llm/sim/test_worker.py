"""The simulated world in a worker process answers exactly as in process: the same replies,
usage, faults and error texts for the same requests, concurrently, across event loops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trm_assets.agent.loop import AgentLoop
from trm_assets.agent.messages import load_agent_prompts
from trm_assets.agent.tools import Toolbox
from trm_assets.agent.tree import load_trees
from trm_assets.harness.data.questions import load_questions
from trm_assets.llm.protocol import LLMProvider
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.worker import SimWorkerProvider
from trm_assets.llm.sim.world import load_world
from trm_assets.llm.sim_config import SimConfig

from .conftest import PROMPTS, SMOKE

# faults on (timeouts without the wait, 5xx, malformed turns), fresh draws, a little latency
CONFIG = SimConfig(
    fault_timeout_rate=0.05,
    fault_http_5xx_rate=0.05,
    fault_malformed_rate=0.05,
    timeout_sleep_s=0.0,
    latency_ms_mean=2.0,
    latency_ms_jitter=1.0,
)


def _rollouts(provider: LLMProvider, replicates: int) -> list[Any]:
    prompts = load_agent_prompts(PROMPTS)
    questions = load_questions(SMOKE / "questions.json")
    toolbox = Toolbox(trees=load_trees(SMOKE / "trees"))
    loop = AgentLoop(provider, prompts, max_steps=8, temperature=1.0)
    skills = {p.name: p.read_text() for p in (PROMPTS / "skills").glob("*.md")}

    async def one(q: Any, rep: int) -> Any:
        o = await loop.run(q, tools=toolbox.session(q), skills=skills, seed=rep)
        steps = [(s.role, s.tool_name, s.arguments, s.content, s.error) for s in o.steps]
        return (q.question_id, rep, o.letter, o.stop_reason, o.infra_error, o.usage, steps)

    async def barrier(rep: int) -> list[Any]:  # every question of a replicate in flight at once
        return list(await asyncio.gather(*(one(q, rep) for q in questions)))

    out: list[Any] = []
    for rep in range(replicates):  # one event loop per barrier, as the harness runs them
        out.extend(asyncio.run(barrier(rep)))
    return out


def test_the_worker_gives_the_in_process_replies_bit_for_bit() -> None:
    world = load_world(SMOKE)
    in_process = SimulatedProvider(world, CONFIG)
    expected = _rollouts(in_process, replicates=3)
    with SimWorkerProvider(SMOKE / "ground_truth.json", CONFIG) as worker:
        assert isinstance(worker, LLMProvider) and worker.is_simulated
        got = _rollouts(worker, replicates=3)
        assert got == expected
        assert worker.usage == in_process.usage and worker.usage.total_tokens > 0
    stops = {r[3] for r in expected}
    assert "error" in stops and "answer" in stops  # the faults were exercised


def test_a_dead_worker_fails_the_call_instead_of_hanging() -> None:
    world = load_world(SMOKE)
    qid = world.question_ids()[0]
    messages: list[Any] = [
        {"role": "system", "content": "You answer questions about videos."},
        {"role": "user", "content": f"Question id: {qid}\nQuestion: ?\nA. a\nB. b\nC. c\nD. d"},
    ]
    with SimWorkerProvider(SMOKE / "ground_truth.json", SimConfig()) as worker:
        first = asyncio.run(worker.chat(messages, seed=1))
        assert first.content or first.tool_calls
        worker._proc.kill()
        worker._proc.wait()

        async def call() -> None:
            await asyncio.wait_for(worker.chat(messages, seed=2), timeout=30)

        with pytest.raises(RuntimeError, match="the simulator worker exited"):
            asyncio.run(call())  # not a TimeoutError: it fails at once
