"""The training loop (issue 7): validation, step, ten-step slow update, state/resume, observation,
budget and CLI — on the SIMULATED smoke sample.

Seed fidelity points (``../shared/seed/harness-design.zh.txt`` §8-15, SPEC §5) → their tests:

================================================  ==================================================
fidelity point                                    test
================================================  ==================================================
#10 batching: FFD + round robin + wrong-answer    test_begin_epoch_batches_are_seeded_and_mixed
mix, seeded per epoch, saved for resume
#6 ladder: persisted atomically, fingerprint      test_ladder_store_roundtrip_and_mismatch_raises
mismatch raises (never silently rebuilt)
#6 ladder: cold order from one observation, warm  test_state_fields_roundtrip_and_corruption
switch ``gate_epoch_observed`` persisted
#6 anti-leak: refresh from exactly step rollouts  test_ladder_refresh_uses_exactly_three_sources
``{base}_e{E}_s*`` minus ``*_gate_*``, R, kept
R2; never gate / reverted R2 / held-out runs
§11 block-sequential validation: temp dir         test_validation_block_barrier_cache_and_cleanup
cleaned, strict per-block order (baseline misses
→ candidate block → pair → decide), ``_gate_``
run ids
§10/GATE §6.3 BaselineCache: R1 provenance, disk  test_baseline_cache_disk_before_memory_and_r1
before memory, purge of a killed unit's entries
§14 gate_evidence: one row per question + per     test_gate_evidence_rows_per_question_and_block
block
gate policies share everything but the decision   test_gate_policies_share_all_but_the_decision
#13 accept: snapshot before merge, promote →      test_accept_semantics
manifest → paths, merge, clear rejected buffer,
probation (not default-strategy.md), extend
bundle
#13 reject: only ``applied`` edits blacklisted,   test_reject_and_abort_semantics
cooldown; abort: no blacklist
#13 ten slow-update steps, in order, each alone   test_slow_update_refuses_out_of_order,
after a restart                                   test_resume_from_every_boundary_is_identical
#13 step 4 rollback = file-level revert as a new  test_probation_rollback_is_a_file_level_revert
version, manifest not rewound, correctness ←
anchor
#13 step 8 R2 on (r2_skills_version,              test_r2_runs_the_new_version_pair
new_prompts_version), never R's versions
#13 persisted state fields; missing key =         test_state_fields_roundtrip_and_corruption
corruption; structural change refuses; decision
change warns
#13 checkpoint/resume from every unit boundary    test_resume_from_every_boundary_is_identical
"killed at any point": mid-unit kill + resume     test_kill_mid_unit_and_resume_is_identical
#13 early stop, deliver best, final test          test_plan_walks_every_unit_in_order,
evaluation                                        test_smoke_cli_two_epochs_raise_expected_acc
§14 observation tables: NULL never 0, idempotent  test_observation_null_scores_and_idempotent
budget: dry-run estimate, unreachable-gate        test_dry_run_warns_when_no_gate_can_accept
warning
test pool never decides (held-out only)           test_ladder_refresh_uses_exactly_three_sources
providers: sim default, OpenAI-compatible on      test_providers_openai_needs_a_base_url
demand
done-when: init + train smoke, report --json,     test_smoke_cli_two_epochs_raise_expected_acc
best's expected val accuracy > seed's, < 60 s
================================================  ==================================================
"""

from __future__ import annotations

import asyncio
import importlib
import json
import shutil
import time
import warnings
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import click
import pytest
from click.testing import CliRunner

from trm_assets.cli.init import init_cmd
from trm_assets.cli.report import report_cmd, report_data
from trm_assets.cli.train import train_cmd
from trm_assets.domain import gate as domain_gate
from trm_assets.domain.baseline_cache import (
    LADDER_DRAW,
    BaselineKey,
    ProvenanceError,
    make_entry,
)
from trm_assets.domain.edit_schema import Edit
from trm_assets.domain.edits import apply_edits
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.gate import NOT_VERIFIED, VERIFIED_HARMFUL
from trm_assets.domain.ladder import new_ladder, update_ladder
from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.evolution.types import EvolutionRecord, text_hash
from trm_assets.harness.data.config import load_config
from trm_assets.harness.data.dataset import load_dataset
from trm_assets.harness.loop import gate as validate_mod
from trm_assets.harness.loop.budget import estimate
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.harness.loop.gate import GateRequest, ValidationOutcome, validate_candidate_skill
from trm_assets.harness.loop.observer import LoopObserver
from trm_assets.harness.loop.plan import Action, Progress, next_action
from trm_assets.harness.loop.runner import run_action
from trm_assets.harness.loop.slow_update import ladder_sources
from trm_assets.harness.loop.step import apply_accept, apply_reject, begin_epoch
from trm_assets.harness.storage import cache_store as bcs
from trm_assets.harness.storage.checkpoint import (
    SEED_FIELDS,
    STATE_KEYS,
    CheckpointError,
    ConfigDriftWarning,
    changed_settings,
    decision_configs,
    load_state,
    new_state,
    state_from_dict,
    state_to_dict,
)
from trm_assets.harness.storage.ladder_store import load_ladder, save_ladder
from trm_assets.harness.storage.observation import read_rows, write_rows
from trm_assets.harness.storage.pools import build_pools
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.harness.storage.versions import read_meta, read_version_files
from trm_assets.harness.storage.workspace import read_manifest
from trm_assets.llm.factory import ProviderConfigError, build_providers
from trm_assets.llm.settings import Settings
from trm_assets_tests.harness.loop.conftest import digest, run_to_end
from trm_assets_tests.tiny import SMOKE_CONFIG, tiny_config
from trm_assets_tests.truth import best_run, evaluated_run, run_accuracy, run_versions
from trm_bench.overhead import new_workspace

# ------------------------------------------------------------------------------------------------
# planner


def _walk(epochs: int, steps: int, stop_after_epoch: int | None = None) -> list[Action]:
    p = Progress(False, 0, 0, 0, epochs, steps, False, False)
    seen: list[Action] = []
    while True:
        a = next_action(p)
        seen.append(a)
        if a.kind == "done":
            return seen
        if a.kind == "init":
            p = replace(p, initialized=True)
        elif a.kind == "step":
            p = replace(p, next_step=p.next_step + 1)
        elif a.kind == "slow_update":
            if a.slow_step == 9 and stop_after_epoch == p.epoch:
                p = replace(p, early_stopped=True)
            if a.slow_step == 10:
                p = replace(p, epoch=p.epoch + 1, next_step=0, slow_done=0)
            else:
                p = replace(p, slow_done=p.slow_done + 1)
        elif a.kind == "finalize":
            p = replace(p, finalized=True)


def test_plan_walks_every_unit_in_order() -> None:
    units = _walk(epochs=2, steps=3)
    assert [u.kind for u in units[:4]] == ["init", "step", "step", "step"]
    assert [u.slow_step for u in units[4:14]] == list(range(1, 11))
    assert units[14] == Action("step", epoch=1, step=0)
    assert units[-2:] == [
        Action("finalize", reason="completed"),
        Action("done", reason="completed"),
    ]
    assert len(units) == 1 + 2 * (3 + 10) + 2
    # early stop fires in slow step 9 but the ladder refresh (step 10) still runs
    stopped = _walk(epochs=5, steps=1, stop_after_epoch=0)
    kinds = [(u.kind, u.slow_step) for u in stopped]
    assert kinds[-3:] == [("slow_update", 10), ("finalize", None), ("done", None)]
    assert stopped[-1].reason == "early_stopped"


# ------------------------------------------------------------------------------------------------
# batching and ladder


def _fresh_ctx(tmp_path: Path, *extra: str) -> tuple[Path, Any]:
    cfg = tiny_config(*extra)
    ws = new_workspace(tmp_path / "ws", cfg)
    return ws, cfg


def test_begin_epoch_batches_are_seeded_and_mixed(tmp_path: Path) -> None:
    ws, cfg = _fresh_ctx(tmp_path)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        diag = list(ctx.pools.diagnosis)
        wrong = set(diag[::3])
        state = new_state(cfg)
        state.correctness = {q: q not in wrong for q in diag}
        begin_epoch(ctx, state, 0)
        again = new_state(cfg)
        again.correctness = dict(state.correctness)
        begin_epoch(ctx, again, 0)
        other = new_state(cfg)
        other.correctness = dict(state.correctness)
        begin_epoch(ctx, other, 1)
    flat = sorted(q for b in state.batches for q in b)
    assert flat == sorted(diag)  # a partition of the diagnosis pool
    assert state.batches == again.batches  # same seed, same epoch → same batches
    assert state.batches != other.batches  # another epoch draws another stream
    with_failures = sum(any(q in wrong for q in b) for b in state.batches)
    assert with_failures >= len(state.batches) - 1  # wrong answers spread over the batches
    assert state.epoch_start_correctness.keys() == set(ctx.pools.validation)


def test_ladder_store_roundtrip_and_mismatch_raises(tmp_path: Path) -> None:
    ws, cfg = _fresh_ctx(tmp_path)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        tasks = {q: ctx.questions[q].task_type for q in ctx.pools.validation}
        params = ctx.ladder_params()
    ladder = update_ladder(new_ladder(tasks, params), "train_init", dict.fromkeys(tasks, True))
    path = tmp_path / "ladder.json"
    save_ladder(path, ladder)
    assert load_ladder(path, tasks, params) == ladder
    assert not list(tmp_path.glob(".ladder.json.*"))  # atomic write leaves no temp file
    smaller = dict(list(tasks.items())[1:])
    with pytest.raises(DataFormatError, match="pool_fingerprint"):
        load_ladder(path, smaller, params)


def test_ladder_refresh_uses_exactly_three_sources(tiny_run: tuple[Path, list[Path]]) -> None:
    ws, _ = tiny_run
    state = json.loads((ws / "state.json").read_text())
    ladder = json.loads((ws / "ladder.json").read_text())
    applied = ladder["applied_runs"]
    assert applied[0] == "train_init"
    for e in range(2):
        slow_epoch = [r for r in applied if r.startswith(f"train_e{e}_")]
        assert f"train_e{e}_s0" in slow_epoch and f"train_e{e}_R" in slow_epoch
    assert not [r for r in applied if "_gate_" in r or "_test_" in r or r.startswith("eval_")]
    last = state["slow"]
    expected = ["train_e1_s0", "train_e1_s1", "train_e1_R"]
    if last["r2"]["kept"]:
        expected.append("train_e1_R2")
    assert last["ladder"]["sources"] == expected
    with RunLogReader.open(ws / "runs.duckdb") as reader:
        gate_runs = reader.run_ids(glob="train_e1_s*_gate_*")
    assert gate_runs, "the glob would match gate runs without the exclusion"
    cfg = tiny_config()
    with loop_context(
        ws, cfg, build_providers(cfg.provider_spec())
    ) as ctx:  # a reverted R2 is never a source
        assert "train_e1_R2" not in ladder_sources(ctx, 1, r2_kept=False)
        best = read_manifest(ws).best
        assert best is not None and "_test_" not in str(best.run_id)  # test never decides
    assert best.run_id == best_run(ws, 2)  # the argmax of the kept validation runs


# ------------------------------------------------------------------------------------------------
# validation


def _request(ctx: LoopContext, task_type: str, gate_run_id: str, text: str) -> GateRequest:
    paths = ctx.paths
    name = skill_file_name(task_type)
    qids = ctx.validation_by_type[task_type]
    return GateRequest(
        epoch=0,
        step=0,
        skill_file=name,
        task_type=task_type,
        candidate_text=ctx.skills(paths.skills_version)[name] + "\n- " + text + "\n",
        baseline_skills=ctx.skills(paths.skills_version),
        skills_version=paths.skills_version,
        prompts_version=paths.prompts_version,
        ladder_qids=qids,
        pool_qids=qids,
        gate_run_id=gate_run_id,
    )


def _biggest_type(ctx: LoopContext) -> str:
    return max(ctx.validation_by_type, key=lambda t: (len(ctx.validation_by_type[t]), t))


def test_validation_block_barrier_cache_and_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, cfg = _fresh_ctx(tmp_path, "gate_block=2")
    calls: list[tuple[str, int]] = []

    class Barriers(LoopObserver):  # the loop's observer seam, no patching
        def on_barrier(self, result: Any) -> None:
            calls.append((result.run_id.rsplit("_", 1)[1], result.n))

    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        ctx.observers = (Barriers(),)
        tt = _biggest_type(ctx)
        req = _request(ctx, tt, "t_e0_s0_gate_x", "read every caption twice")
        out = asyncio.run(validate_candidate_skill(ctx, req))
        assert out.blocks >= 2
        # per block: baseline misses first, then the whole candidate block, never interleaved
        arms = [arm for arm, _ in calls]
        assert arms[0] == "base" and arms.count("cand") == out.blocks
        assert all(arms[i] == "cand" for i in range(1, len(arms)) if arms[i - 1] == "base")
        assert not any(ctx.paths.tmp_dir.iterdir())  # the candidate temp dir is gone
        # a second gate against the same baseline is served from the on-disk cache
        calls.clear()
        second = asyncio.run(validate_candidate_skill(ctx, replace(req, gate_run_id="t_gate_2")))
        assert second.cache_hits > 0
        assert all(arm == "cand" for arm, _ in calls[: second.blocks])
        with pytest.raises(ValueError, match="_gate_"):
            asyncio.run(validate_candidate_skill(ctx, replace(req, gate_run_id="t_e0_s0_x")))


def test_a_baseline_infra_failure_is_retried_once_and_its_retry_is_the_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GATE §2: a baseline rollout lost to infra is retried once; the retry's outcome is the
    pair's baseline (audit: deleting the retry left every gate test passing)."""
    ws, cfg = _fresh_ctx(tmp_path, "gate_block=4")
    arms: list[tuple[str, list[tuple[str, int]]]] = []
    real = validate_mod._rollouts
    lost: list[tuple[str, int]] = []

    async def flaky(ctx: Any, run_id: str, positions: Any, skills: Any, req: Any, kind: str) -> Any:
        res = await real(ctx, run_id, positions, skills, req, kind)
        arms.append((kind, list(positions)))
        if kind == "gate_baseline" and not lost:  # the first baseline barrier loses one rollout
            lost.append(tuple(positions[0]))
            gone = replace(res.predictions[0], failure_kind="infra", correct=None)
            res = replace(res, predictions=(gone, *res.predictions[1:]))
        return res

    monkeypatch.setattr(validate_mod, "_rollouts", flaky)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        req = _request(ctx, _biggest_type(ctx), "t_e0_s0_gate_x", "read every caption twice")
        asyncio.run(validate_candidate_skill(ctx, req))
        # the retry: one more baseline barrier, right after the first, of the lost position only
        assert arms[0][0] == "gate_baseline" and arms[1] == ("gate_baseline", lost)
        assert arms[2][0] == "gate_candidate"
        q, rep = lost[0]
        truth = {
            (r["question_id"], r["replicate"]): r["correct"]
            for r in ctx.log.query(
                "SELECT question_id, replicate, correct FROM predictions WHERE run_id LIKE ?",
                ["t_e0_s0_gate_x%base%"],
            )
        }
        (row,) = ctx.log.query(
            "SELECT baseline FROM gate_evidence WHERE gate_run_id = ? AND question_id = ? "
            "AND replicate = ? AND row_kind = 'question'",
            [req.gate_run_id, q, rep],
        )
    assert row["baseline"] == truth[(q, rep)] is not None  # the pair holds the retry's outcome


def test_baseline_cache_disk_before_memory_and_r1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = bcs.BaselineCacheStore(tmp_path, "Counting Problem")
    key = BaselineKey("Counting Problem", "h", "v1", "q1", 0, "c")
    entry = make_entry(key, True, provenance="gate_baseline", run_id="x_gate_y_base")
    assert entry is not None

    def broken(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(bcs, "atomic_write_json", broken)
    with pytest.raises(OSError):
        store.put_many([entry])
    assert store.entries == {}  # memory never ahead of disk
    monkeypatch.undo()
    store.put_many([entry])
    assert bcs.BaselineCacheStore(tmp_path, "Counting Problem").get(key) is True
    with pytest.raises(ProvenanceError):  # R1: a ladder draw never becomes a gate baseline
        make_entry(key, True, provenance=LADDER_DRAW, run_id="train_e0_R")
    assert bcs.purge_cache_runs(tmp_path, "x_gate_") == 1
    assert bcs.BaselineCacheStore(tmp_path, "Counting Problem").entries == {}


def test_gate_evidence_rows_per_question_and_block(tiny_run: tuple[Path, list[Path]]) -> None:
    ws, _ = tiny_run
    rows = read_rows(ws / "runs.duckdb", "gate_evidence")
    assert rows
    by_gate: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        assert "_gate_" in r["gate_run_id"]
        by_gate.setdefault(r["gate_run_id"], []).append(r)
    for gate, rs in by_gate.items():
        blocks = [r for r in rs if r["row_kind"] == "block"]
        questions = [r for r in rs if r["row_kind"] == "question"]
        assert len(blocks) == len({r["block"] for r in questions})
        last = max(blocks, key=lambda r: r["block"])
        assert last["positions"] == len(questions), gate  # one row per visited position
        assert last["verdict"] != "CONTINUE"
        assert all(b["verdict"] == "CONTINUE" for b in blocks if b is not last)
    # The ledger charges the gate's model calls with its rollouts (≥ one call per rollout).
    ledger = json.loads((ws / "state.json").read_text(encoding="utf-8"))["budget"]
    gates = [ph["gate"] for ph in ledger.values() if "gate" in ph]
    assert gates and all(g["llm_calls"] >= g["rollouts"] > 0 for g in gates)
    quads = read_rows(ws / "runs.duckdb", "quadrant_pair")
    assert {q["quadrant"] for q in quads} <= {
        "IMPROVED",
        "REGRESSED",
        "PERSISTENT_FAIL",
        "STABLE_SUCCESS",
    }


@pytest.mark.parametrize("policy", ["accept_all", "minibatch_sum", "full_val_point", "ce_gate"])
def test_gate_policies_share_all_but_the_decision(tmp_path: Path, policy: str) -> None:
    ws, cfg = _fresh_ctx(tmp_path, f"gate_policy={policy}")
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        tt = _biggest_type(ctx)
        req = _request(ctx, tt, f"p_gate_{policy}", "check the subtitles first")
        out = asyncio.run(validate_candidate_skill(ctx, req))
        n_pool = len(ctx.validation_by_type[tt])
        rows = read_rows(ctx.paths.run_db, "gate_evidence") if policy != "accept_all" else []
    assert out.policy == policy
    if policy == "accept_all":
        assert out.action == "accept" and out.candidate_rollouts == 0
        return
    questions = [r for r in rows if r["row_kind"] == "question"]
    if policy == "minibatch_sum":
        assert out.d_max == min(3, n_pool) and len(questions) == out.d_max
    if policy == "full_val_point":
        assert out.d_max == n_pool and out.blocks == 1
    if policy != "ce_gate":  # accept iff the candidate wins more discordant pairs
        assert (out.action == "accept") == (out.wins > out.losses)
    assert out.candidate_rollouts == len(questions)


# ------------------------------------------------------------------------------------------------
# step semantics


def _record(ctx: LoopContext, name: str, edits: list[Edit], budget: int = 2) -> EvolutionRecord:
    text = ctx.skills(ctx.paths.skills_version)[name]
    report = apply_edits(text, edits, budget=budget)
    return EvolutionRecord(
        target="skill",
        target_file=name,
        status="applied",
        detail="",
        edits=tuple(edits),
        apply_report=report,
        original_text=text,
        candidate_text=report.text,
        original_hash=text_hash(text),
        candidate_hash=text_hash(report.text),
        budget=budget,
        repaired=False,
    )


def _outcome(
    action: Literal["accept", "reject", "abort"], verdict: str, observed: dict[str, bool | None]
) -> ValidationOutcome:
    return ValidationOutcome(
        action=action,
        verdict=verdict,
        policy="ce_gate",
        gate_run_id="t_gate_x",
        final=None,
        wins=3,
        losses=1,
        blocks=1,
        d_max=4,
        candidate_correctness=observed,
    )


EDITS = [
    Edit(op="add", section="Strategy", anchor=None, text="- Count twice.", rationale="r"),
    Edit(op="replace", section="Strategy", anchor="no such words", text="x", rationale="r"),
    Edit(op="add", section="Strategy", anchor=None, text="- Beyond budget.", rationale="r"),
]


def test_accept_semantics(tmp_path: Path) -> None:
    ws, cfg = _fresh_ctx(tmp_path)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, Action("init"))
        state = load_state(ctx.paths.state, cfg)
        assert state is not None
        tt = _biggest_type(ctx)
        name = skill_file_name(tt)
        qids = ctx.validation_by_type[tt]
        before = {q: state.correctness[q] for q in qids}
        flipped: dict[str, bool | None] = {q: not before[q] for q in qids[:3]}
        state.rejected_buffer[name] = []
        req = _request(ctx, tt, "t_gate_x", "unused")
        version = apply_accept(
            ctx, state, req, _record(ctx, name, EDITS), _outcome("accept", "ACCEPT", flipped)
        )
        assert ctx.paths.skills_version == version == "v2"  # promoted, manifest, paths refreshed
        assert read_version_files(ctx.paths.skills_root, "v2")[name].count("Count twice") == 1
        p = state.probations[name]
        assert p.correctness_snapshot == before  # snapshot taken BEFORE merging
        assert p.anchor_skills_version == "v1" and p.anchor_run_id == "train_init"
        assert all(state.correctness[q] == v for q, v in flipped.items())  # merged
        assert name not in state.rejected_buffer  # cleared
        assert [e["text"] for e in p.pending_edits] == ["- Count twice."]  # applied edits only
        # a second accept of the same skill extends the bundle and keeps the first anchor
        req2 = replace(req, skills_version="v2")
        more = [Edit(op="add", section="Strategy", anchor=None, text="- Again.", rationale="r")]
        apply_accept(ctx, state, req2, _record(ctx, name, more), _outcome("accept", "ACCEPT", {}))
        assert state.probations[name].anchor_skills_version == "v1"
        assert len(state.probations[name].pending_edits) == 2
        # default-strategy.md never opens a probation
        dreq = replace(req, skill_file=DEFAULT_SKILL_FILE, skills_version=ctx.paths.skills_version)
        drec = _record(ctx, DEFAULT_SKILL_FILE, EDITS[:1])
        apply_accept(ctx, state, dreq, drec, _outcome("accept", "ACCEPT", {}))
        assert DEFAULT_SKILL_FILE not in state.probations


def test_reject_and_abort_semantics(tmp_path: Path) -> None:
    ws, cfg = _fresh_ctx(tmp_path, "gate_cooldown_steps=2")
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        state = new_state(cfg)
        tt = _biggest_type(ctx)
        name = skill_file_name(tt)
        req = _request(ctx, tt, "t_gate_x", "unused")
        rec = _record(ctx, name, EDITS)  # statuses: applied, not_found, over_budget
        assert [r.status for r in rec.apply_report.results] == [  # type: ignore[union-attr]
            "applied",
            "not_found",
            "over_budget",
        ]
        apply_reject(ctx, state, req, rec, _outcome("reject", "REJECT_DIR", {}))
        entries = state.rejected_buffer[name]
        assert [e.text for e in entries] == ["- Count twice."]  # only the applied edit
        assert entries[0].tag == NOT_VERIFIED and state.gate_cooldown[name] == 2
        apply_reject(ctx, state, req, rec, _outcome("reject", "REJECT_HARM", {}))
        assert state.rejected_buffer[name][-1].tag == VERIFIED_HARMFUL


# ------------------------------------------------------------------------------------------------
# slow update


def test_slow_update_refuses_out_of_order(tmp_path: Path) -> None:
    ws, cfg = _fresh_ctx(tmp_path)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, Action("init"))
        with pytest.raises(CheckpointError, match="step \\(epoch 0, step 0\\)"):
            run_action(ctx, Action("slow_update", epoch=0, slow_step=2))


def test_probation_rollback_is_a_file_level_revert(tiny_run: tuple[Path, list[Path]]) -> None:
    ws, _ = tiny_run
    root = ws / "store" / "skills"
    metas = [read_meta(root, p.name) for p in sorted(root.iterdir(), key=lambda p: int(p.name[1:]))]
    rollbacks = [m for m in metas if m.reason.startswith("probation rollback")]
    assert rollbacks, "the tiny run is chosen to contain a probation rollback"
    for m in rollbacks:
        anchor = m.extra["reverted_from"]
        assert m.parent is not None and int(m.version[1:]) > int(m.parent[1:])  # a NEW version
        changed = [f for f, h in m.files.items() if read_meta(root, m.parent).files.get(f) != h]
        for f in changed:  # the reverted file has the anchor's content again
            assert read_version_files(root, m.version)[f] == read_version_files(root, anchor)[f]
    history = [r.run_id for r in read_manifest(ws).history]
    assert history.index("train_e0_R") < history.index("train_e1_s0")  # history not rewound


def test_r2_runs_the_new_version_pair(tiny_run: tuple[Path, list[Path]]) -> None:
    ws, _ = tiny_run
    slow = json.loads((ws / "state.json").read_text())["slow"]
    assert slow["r2"]["ran"]
    with RunLogReader.open(ws / "runs.duckdb") as reader:
        r2 = reader.run("train_e1_R2")
        r = reader.run("train_e1_R")
    assert r2 is not None and r is not None
    assert r2["skills_version"] == slow["momentum"]["skills_version"]
    assert r2["prompts_version"] == slow["prompts"]["after"]
    assert (r2["skills_version"], r2["prompts_version"]) != (
        r["skills_version"],
        r["prompts_version"],
    )


# ------------------------------------------------------------------------------------------------
# state and resume


def test_state_fields_roundtrip_and_corruption(
    tiny_run: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    ws, snaps = tiny_run
    cfg = tiny_config()
    data = json.loads((ws / "state.json").read_text())
    assert len(SEED_FIELDS) == 14  # SPEC 5.7's persisted fields, named in checkpoint.py
    for key in SEED_FIELDS:
        assert key in data
    assert state_to_dict(state_from_dict(data)) == data
    assert data["gate_epoch_observed"] is True  # warm ladder after the first refresh
    first = json.loads((snaps[0] / "state.json").read_text())  # after init only
    assert first["gate_epoch_observed"] is False
    for key in STATE_KEYS:
        broken = {k: v for k, v in data.items() if k != key}
        with pytest.raises(CheckpointError, match=key):
            state_from_dict(broken)
    path = tmp_path / "state.json"
    shutil.copy(ws / "state.json", path)
    with pytest.raises(CheckpointError, match="structural"):
        load_state(path, tiny_config("batch_size=10"))
    # the copied checkpoint has no record of its config's values: the fingerprints only
    with pytest.warns(ConfigDriftWarning, match="the earlier values are not on record"):
        load_state(path, tiny_config("gate_alpha=0.2"))
    # in the workspace the record names the keys with both values (the run's own config)
    assert [e["values"] for e in decision_configs(ws / "state.json")] == [cfg.decision_values()]
    with pytest.warns(ConfigDriftWarning) as caught:
        load_state(ws / "state.json", tiny_config("gate_alpha=0.2", "sim.ability=2.5"))
    expected = (
        f"(gate_alpha: {json.dumps(cfg.gate_alpha)} → 0.2, "
        f"sim.ability: {json.dumps(cfg.sim.ability)} → 2.5); resuming with the new values"
    )
    assert [str(w.message).split("checkpoint ", 1)[1] for w in caught] == [expected]
    # loaded again with the same drift: told once per process; another drift (or back and
    # forth in a long-lived process) is told again
    drifted_cfg = tiny_config("gate_alpha=0.2", "sim.ability=2.5")
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        load_state(ws / "state.json", drifted_cfg)
        load_state(ws / "state.json", tiny_config("gate_alpha=0.3"))
        load_state(ws / "state.json", drifted_cfg)
        load_state(ws / "state.json", drifted_cfg)
    told = [str(w.message) for w in again if issubclass(w.category, ConfigDriftWarning)]
    assert [t.split("(", 1)[1].split(")")[0] for t in told] == [
        f"gate_alpha: {json.dumps(cfg.gate_alpha)} → 0.3",
        expected[1:].split(")")[0],
    ]
    # a unit resumed under the new config records it (the next drift names keys against it)
    resumed = tmp_path / "resumed"
    shutil.copytree(snaps[-2], resumed)  # before the last unit
    drifted = tiny_config("gate_alpha=0.2")
    with pytest.warns(ConfigDriftWarning, match=r"\(gate_alpha: "):
        run_to_end(resumed, drifted)
    recorded = [e["values"] for e in decision_configs(resumed / "state.json")]
    assert recorded == [cfg.decision_values(), drifted.decision_values()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_state(path, cfg) is not None


def test_resume_from_every_boundary_is_identical(
    tiny_run: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    ws, snaps = tiny_run
    reference = digest(ws)
    cfg = tiny_config()
    assert len(snaps) == 1 + 2 * (2 + 10) + 1
    for snap in snaps[:-1]:
        resumed = tmp_path / snap.name
        shutil.copytree(snap, resumed)
        run_to_end(resumed, cfg)  # a new context each time: a process restart
        assert digest(resumed) == reference, f"resume after {snap.name} diverged"


class _Killed(Exception):
    pass


@pytest.mark.parametrize("where", ["after_accept", "mid_gate", "after_momentum"])
def test_kill_mid_unit_and_resume_is_identical(
    tiny_run: tuple[Path, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    from trm_assets.harness.loop import session, step

    reference = digest(tiny_run[0])
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with monkeypatch.context() as mp:  # undoes only these patches (not the repository cwd)
        if where == "after_accept":  # the accept's version and manifest exist, no checkpoint yet
            real_accept = step.apply_accept

            def accept_then_die(*a: Any, **k: Any) -> str:
                real_accept(*a, **k)
                raise _Killed

            mp.setattr(step, "apply_accept", accept_then_die)
        elif where == "mid_gate":  # baseline cache written, candidate block not yet run
            real_pair = domain_gate.pair_block

            def pair_then_die(*a: Any, **k: Any) -> Any:
                real_pair(*a, **k)
                raise _Killed

            mp.setattr(validate_mod, "pair_block", pair_then_die)
        else:  # the momentum version exists, the slow step's checkpoint does not
            real_commit = session.UnitSession.commit

            def commit_or_die(s: session.UnitSession, *, behind: bool = False) -> None:
                momentum = s.state.slow.momentum
                if s.action.slow_step == 6 and momentum is not None and momentum.new_version:
                    raise _Killed
                real_commit(s, behind=behind)

            mp.setattr(session.UnitSession, "commit", commit_or_die)
        with pytest.raises(_Killed):
            run_to_end(ws, cfg)
    run_to_end(ws, cfg)
    assert digest(ws) == reference


# ------------------------------------------------------------------------------------------------
# observation, budget, providers


def test_observation_null_scores_and_idempotent(tiny_run: tuple[Path, list[Path]]) -> None:
    ws, _ = tiny_run
    rows = read_rows(ws / "runs.duckdb", "dual_metric_eval")
    assert [r["epoch"] for r in rows] == [0, 1]
    assert all(r["soft_score"] is None and r["mixed_score"] is None for r in rows)
    assert all(r["hard_accuracy"] is not None for r in rows)
    holdout = read_rows(ws / "runs.duckdb", "holdout_eval")
    assert {r["label"] for r in holdout} == {"seed", "epoch_start", "current", "best"}
    cfg = tiny_config()
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        row = {k: rows[0][k] for k in rows[0]}
        write_rows(ctx.log, "dual_metric_eval", [row])
        write_rows(ctx.log, "dual_metric_eval", [row])
    assert len(read_rows(ws / "runs.duckdb", "dual_metric_eval")) == 2


def test_dry_run_warns_when_no_gate_can_accept() -> None:
    cfg = tiny_config("gate_passes=1", "gate_max_blocks=1", "gate_block=2")
    ds = load_dataset(cfg, with_trees=False)
    est = estimate(cfg, ds.questions, build_pools(cfg, ds.questions))
    assert est.unreachable and any("can ever ACCEPT (gates still reject" in w for w in est.warnings)
    ok = estimate(tiny_config(), ds.questions, build_pools(tiny_config(), ds.questions))
    assert ok.per_epoch.step_rollouts == 24 and ok.per_epoch.r == 24


def test_dry_run_says_what_a_gate_visits_at_each_decoding() -> None:
    """The estimate's gate maximum is the plan the decoding gives (gate.SequentialGate): three
    passes with independent draws, one pass at temperature 0 and below gate_fresh_temperature, and
    a real endpoint's uniform order over the whole pool."""
    ds = load_dataset(tiny_config(), with_trees=False)
    cases = {
        ("agent_temperature=1", "gate_passes=3"): ("the information ladder, 3 pass(es)", 3),
        ("agent_temperature=0.3", "gate_passes=null"): ("< gate_fresh_temperature 1:", 1),
        ("agent_temperature=1", "gate_passes=null"): ("3 passes for pools under 60", 3),
        ("agent_temperature=0", "gate_passes=1"): ("(agent temperature 0: a second pass", 1),
        (
            "agent_temperature=0.3",
            "gate_passes=3",
            "gate_fresh_temperature=0.3",
        ): ("the information ladder, 3 pass(es) (agent temperature 0.3: independent", 3),
        ("agent_temperature=1", "gate_passes=null", "llm_provider=openai"): (
            "1 pass(es) over the validation pool in a seeded uniform order (agent temperature 1",
            1,
        ),
        ("agent_temperature=1", "gate_passes=2", "llm_provider=openai"): (
            "2 pass(es) over the validation pool in a seeded uniform order",
            2,
        ),
    }
    for overrides, (says, passes) in cases.items():
        cfg = tiny_config(*overrides, "gate_block=1")
        pools = build_pools(cfg, ds.questions)
        est = estimate(cfg, ds.questions, pools)
        assert says in est.gate_plan, (overrides, est.gate_plan)
        # several passes on a real endpoint count draws of one text as independent: the dry run
        # says so (the simulated world's config check covers its own)
        warned = [w for w in est.warnings if "on a real endpoint counts" in w]
        real_passes = "llm_provider=openai" in overrides and passes > 1
        assert len(warned) == int(real_passes), (overrides, est.warnings)
        by_type = Counter(ds.by_id()[q].task_type for q in pools.validation)
        assert est.d_max == {t: n * passes for t, n in sorted(by_type.items())}, overrides


def test_providers_openai_needs_a_base_url() -> None:
    cfg = tiny_config("llm_provider=openai", "agent_model=m", "evolve_model=m", "gate_passes=1")
    with pytest.raises(ProviderConfigError, match="TRM_LLM_BASE_URL"):
        build_providers(cfg.provider_spec(), Settings(_env_file=None, base_url=None))
    p = build_providers(
        cfg.provider_spec(), Settings(_env_file=None, base_url="http://127.0.0.1:9/v1")
    )
    assert not p.simulated and p.oracle is None and p.agent.model == "m"
    assert build_providers(tiny_config().provider_spec()).simulated


# ------------------------------------------------------------------------------------------------
# done-when: trm init + trm train on the smoke config, trm report --json


@click.group()
def _cli() -> None:
    pass


for _cmd in (init_cmd, train_cmd, report_cmd):
    _cli.add_command(_cmd)


#: ``sum(range(10**6))`` in ms on the reference host of the "< 60 s" smoke run: the 2-core
#: sandbox on an ordinary day (its suite ran in 388-474 s; on a day it read 33-43 ms the suite
#: took twice as long and the smoke run 47-61 s of CPU).
REFERENCE_HOST_MS = 20.0
#: the most the bound is scaled: a host slower than this fails the check (review: without a
#: cap, a contended host's timing made the bound as large as it liked)
MAX_HOST_FACTOR = 2.5


def _host_speed_ms() -> float:
    """How fast this host runs Python now: ``sum(range(10**6))`` in ms of this process's CPU
    time, best of 7. CPU time, like the run it scales: the wall clock also counts the time other
    processes hold the cores (review: three busy loops beside it took the wall figure from 34 to
    145 ms, the CPU figure stayed at 36)."""
    import timeit

    runs = timeit.repeat("sum(range(1_000_000))", number=1, repeat=7, timer=time.process_time)
    return min(runs) * 1000.0


def test_smoke_cli_two_epochs_raise_expected_acc(tmp_path: Path) -> None:
    runner = CliRunner()
    ws = str(tmp_path / "ws")
    cfg = str(SMOKE_CONFIG)
    assert runner.invoke(_cli, ["init", "--workspace", ws, "--config", cfg]).exit_code == 0
    # the process's imports are not the run's work (whether another test made them came first)
    for module in ("dagster", "trm_assets.defs.build", "trm_assets.defs.driver"):
        importlib.import_module(module)

    host_ms = _host_speed_ms()
    t0, c0 = time.perf_counter(), time.process_time()
    res = runner.invoke(_cli, ["train", "--workspace", ws, "--config", cfg])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert res.exit_code == 0, res.output
    # CPU time of this process: the machine is shared, other processes inflate the wall time
    # (the run is one CPU-bound process). "< 60 s" holds on the reference host; a slower host
    # (the sandbox ran at 35-43 ms some days) scales the bound by its measured speed.
    bound = 60.0 * min(MAX_HOST_FACTOR, max(1.0, host_ms / REFERENCE_HOST_MS))
    assert cpu < bound, (
        f"smoke run used {cpu:.1f} s of CPU ({wall:.1f} s wall); bound {bound:.0f} s on a host "
        f"running sum(range(10**6)) in {host_ms:.1f} ms (reference {REFERENCE_HOST_MS} ms)"
    )
    assert "epoch 1 step 3" in res.output and "delivered best" in res.output
    again = runner.invoke(_cli, ["train", "--workspace", ws, "--config", cfg])
    assert again.exit_code == 2 and "--resume" in again.output  # never silently restarts
    text = runner.invoke(_cli, ["report", "--workspace", ws])
    assert text.exit_code == 0 and "budget (rollouts / tokens) by phase" in text.output
    other = runner.invoke(
        _cli, ["train", "--workspace", ws, "--config", "data/configs/default.yaml", "--resume"]
    )
    # another config's structure (pools, batches) refuses to resume instead of mixing states
    assert other.exit_code == 2 and "Resume with the original config" in other.output
    out = runner.invoke(_cli, ["report", "--workspace", ws, "--json"])
    report = json.loads(out.output)
    assert report == report_data(Path(ws))
    assert len(report["epochs"]) >= 2
    keys = {
        "epoch", "val_accuracy", "test_accuracy", "val_expected_accuracy", "accepted",
        "rejected", "rolled_back", "gates", "expected_false_accepts", "rollouts", "tokens",
        "infra_failures", "aborted", "val_skills_version", "val_prompts_version",
        "test_skills_version", "test_prompts_version",
    }  # fmt: skip
    for e in report["epochs"]:
        assert set(e) == keys and e["rollouts"] > 0 and e["tokens"] > 0
        assert e["val_accuracy"] is not None and e["val_expected_accuracy"] is not None
    assert set(report["seed"]) == {"val_accuracy", "val_expected_accuracy"}
    assert set(report["best"]) == {
        "skills_version", "prompts_version", "val_accuracy", "val_expected_accuracy",
    }  # fmt: skip
    assert report["best"]["val_expected_accuracy"] > report["seed"]["val_expected_accuracy"]
    smoke = load_config(SMOKE_CONFIG, environ={}, dotenv_path=None)
    assert read_manifest(ws).current.skills == report["best"]["skills_version"]  # delivered
    # the numbers, recomputed from the run log and the store (not through report_data)
    wsp = Path(ws)
    assert report["seed"]["val_accuracy"] == pytest.approx(run_accuracy(wsp, "train_init")[0])
    epoch_rows = {r["epoch"]: r for r in read_rows(wsp / "runs.duckdb", "epoch_report")}
    for e in report["epochs"]:
        kept = evaluated_run(wsp, e["epoch"])
        assert e["val_accuracy"] == pytest.approx(run_accuracy(wsp, kept)[0]), e
        # each accuracy beside the pair its run evaluated (a review found val of one pair next
        # to the versions and test accuracy of another, with no column saying so)
        val_pair = run_versions(wsp, kept)
        assert (e["val_skills_version"], e["val_prompts_version"]) == val_pair, e
        row = epoch_rows[e["epoch"]]
        assert (row["val_skills_version"], row["val_prompts_version"]) == val_pair
        assert run_versions(wsp, row["val_run_id"]) == val_pair
        test_run = f"train_test_{e['test_skills_version']}_{e['test_prompts_version']}"
        assert run_versions(wsp, test_run) == (e["test_skills_version"], e["test_prompts_version"])
        assert e["test_accuracy"] == pytest.approx(run_accuracy(wsp, test_run)[0]), e
        assert (row["skills_version"], row["prompts_version"]) == run_versions(wsp, test_run)
    best = best_run(wsp, len(report["epochs"]))
    assert report["best"]["val_accuracy"] == pytest.approx(run_accuracy(wsp, best)[0])
    best_pair = run_versions(wsp, best)
    assert (report["best"]["skills_version"], report["best"]["prompts_version"]) == best_pair
    delivered = report["delivered"]  # finalize: the best, and its accuracy on the test pool
    assert (delivered["skills_version"], delivered["prompts_version"]) == best_pair
    assert delivered["val_accuracy"] == pytest.approx(run_accuracy(wsp, best)[0])
    final_run = f"train_test_{best_pair[0]}_{best_pair[1]}"
    assert delivered["test_accuracy"] == pytest.approx(run_accuracy(wsp, final_run)[0])
    assert f"delivered ({delivered['reason']}): {best_pair[0]}/{best_pair[1]} val" in text.output
    assert smoke.epochs == 2


def test_changed_settings_names_every_changed_leaf() -> None:
    old = {"a": 1, "b": {"x": 0.5, "y": "s"}, "gone": [1, 2]}
    new = {"a": 1, "b": {"x": 0.25, "y": "t"}, "new": None}
    assert changed_settings(old, new) == [
        "b.x: 0.5 → 0.25",
        'b.y: "s" → "t"',
        "gone: [1, 2] → unset",
        "new: unset → null",
    ]
    assert changed_settings(old, old) == []


def test_report_never_shows_a_best_beside_another_pairs_expected_accuracy(
    tiny_run: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    """While a slow update is under way its best step can move the manifest's best; the report
    showed the new pair beside the previous epoch report's expected accuracy (review: v6/v4
    with v4/v1's 0.4926)."""
    _, snaps = tiny_run
    snap = next(
        s
        for s in reversed(snaps)
        if (d := json.loads((s / "state.json").read_text()))["history"] and d["final"] is None
    )
    ws = tmp_path / "ws"
    shutil.copytree(snap, ws)
    before = report_data(ws)["best"]
    last = json.loads((ws / "state.json").read_text())["history"][-1]["best"]
    assert (before["skills_version"], before["prompts_version"]) == (
        last["skills_version"],
        last["prompts_version"],
    )
    assert before["val_expected_accuracy"] == last["val_expected_accuracy"] is not None
    manifest = json.loads((ws / "manifest.json").read_text())
    # another pair than the last report's best and the seed's (v1): the slow update's new best
    other = next(
        v
        for v in sorted(p.name for p in (ws / "store" / "skills").iterdir())
        if v not in ("v1", last["skills_version"])
    )
    manifest["best"] = {"skills": other, "prompts": "v1", "val_accuracy": 0.9, "run_id": None}
    (ws / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    moved = report_data(ws)["best"]
    assert (moved["skills_version"], moved["prompts_version"], moved["val_accuracy"]) == (
        other,
        "v1",
        0.9,
    )
    assert moved["val_expected_accuracy"] is None  # not known until the epoch's report
