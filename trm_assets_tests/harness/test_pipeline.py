"""End to end over the real parts: init → inference (simulated agent) into the run log →
diagnosis → evolve one skill → new version → evaluation run → promote to a seed → new workspace."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trm_assets.agent.messages import load_agent_prompts
from trm_assets.agent.tools import Toolbox
from trm_assets.agent.tree import load_trees
from trm_assets.evolution.diagnosis import load_diagnose_prompts, run_diagnosis
from trm_assets.evolution.evolve import evolve_single_skill, load_evolve_prompts
from trm_assets.harness.data.questions import load_questions
from trm_assets.harness.loop.rollouts import run_inference
from trm_assets.harness.storage import versions as store
from trm_assets.harness.storage.runlog import RunLog, RunLogReader
from trm_assets.harness.storage.workspace import (
    advance_current,
    init_workspace,
    init_workspace_from_seed,
    promote_version,
    prompt_store,
    read_manifest,
    record_run,
    resolve_paths,
    skill_store,
)
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.world import load_world
from trm_assets.llm.sim_config import ProposalMix, SimConfig

SMOKE = Path(__file__).resolve().parents[2] / "data" / "smoke"


def test_diagnose_evolve_version_promote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    qref = str(SMOKE / "questions.json")
    init_workspace("ws", questions_ref=qref)
    paths = resolve_paths("ws")
    questions = load_questions(qref)[:24]
    world = load_world(SMOKE)
    mix = ProposalMix(cue=1.0, neutral=0.0, harmful=0.0, malformed=0.0)
    llm = SimulatedProvider(world, SimConfig(proposal_mix=mix), inject_faults=False)
    toolbox = Toolbox(load_trees(SMOKE / "trees"))
    skills = store.read_tree(paths.skills_dir)
    agent_prompts = load_agent_prompts(paths.prompts_dir)

    async def infer(log: RunLog, run_id: str, skills: dict[str, str], version: str) -> None:
        await run_inference(
            questions,
            llm=llm,
            tools=toolbox,
            log=log,
            run_id=run_id,
            concurrency=4,
            max_steps=8,
            skills=skills,
            prompts=agent_prompts,
            skills_version=version,
            prompts_version=paths.prompts_version,
            questions_ref=qref,
        )

    with RunLog.open(paths.run_db) as log:
        record_run("ws", "base_e0_s0", kind="step")
        asyncio.run(infer(log, "base_e0_s0", skills, "v1"))
        result = asyncio.run(
            run_diagnosis(
                "base_e0_s0",
                questions,
                toolbox.trees,
                llm,
                RunLogReader.open(paths.run_db),
                skill_store(paths),
                load_diagnose_prompts(prompt_store(paths)),
                concurrency=2,
            )
        )
        # the failures are the run's task failures (infra ones say nothing about the text),
        # one case per question, each in its task type's pack
        preds = log.predictions("base_e0_s0")
        failed = {
            str(r["question_id"])
            for r in preds
            if r["correct"] is False and r["failure_kind"] != "infra"
        }
        assert result.n_failed == len(failed) > 0 and result.skill_packs
        cases = [c for p in result.skill_packs.values() for c in p.cases]
        others = [
            *result.system_pack.cases,
            *(c for p in result.tool_packs.values() for c in p.cases),
        ]
        ids = [c.question_id for c in (*cases, *others)]
        assert sorted(ids) == sorted(failed)  # every failure in exactly one pack
        assert all("step" in c.trace_summary for c in cases)
        name, pack = next(iter(result.skill_packs.items()))
        rec = asyncio.run(
            evolve_single_skill(
                pack,
                skill_store(paths),
                llm=llm,
                template=load_evolve_prompts(prompt_store(paths)).evolve_skill,
                budget=2,
            )
        )
        assert rec.status == "applied"
        meta = advance_current(
            "ws", "skills", {name: rec.candidate_text}, reason="accept", edits=rec.report_rows()
        )
        assert meta.version == "v2" and meta.edits[0]["status"] == "applied"
        paths = resolve_paths("ws")
        record_run("ws", "eval_v2", kind="eval")
        asyncio.run(infer(log, "eval_v2", store.read_tree(paths.skills_dir), "v2"))

        # promotion reads the run log beside this process's writer
        seed = promote_version(
            "ws", version="v2", eval_run_id="eval_v2", name="s", seeds_dir="seeds"
        )
    assert seed.skills[name] == rec.candidate_text
    assert seed.meta.questions_ref == qref
    with pytest.raises(store.StoreError, match="evaluated skills v2, not v1"):
        promote_version("ws", version="v1", eval_run_id="eval_v2", name="t", seeds_dir="seeds")

    res = init_workspace_from_seed("ws", "s", seeds_dir="seeds")
    assert res.archived is not None and read_manifest(res.archived).current.skills == "v2"
    assert store.read_tree(res.paths.skills_dir)[name] == rec.candidate_text
