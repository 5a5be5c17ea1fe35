"""``trm bench optimizer`` and ``trm bench overhead`` on a tiny SIMULATED configuration: the JSON
contract, and that the figures are computed from the runs and the oracle (not made up)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trm_assets.harness.data.config import load_config
from trm_assets.harness.data.dataset import load_dataset
from trm_assets.harness.storage.pools import build_or_load_pools
from trm_assets.llm.sim.oracle import best_expected_accuracy
from trm_assets.llm.sim.world import load_world
from trm_bench.optimizer import (
    POLICIES,
    cli,
    summarize,
    summarize_aa,
    sweep_mix,
    wilson,
)
from trm_bench.optimizer_criteria import criteria, format_criteria
from trm_bench.optimizer_run import AA_NOOP, RunSpec, execute, resolve_config
from trm_bench.overhead import (
    SMALL_EPOCH,
    BarrierLog,
    ideal_seconds,
    makespan,
    schedule_seconds,
)
from trm_bench.overhead import cli as overhead_cli

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "data" / "configs" / "smoke.yaml"
TINY = (*SMALL_EPOCH, "concurrency=4")
BUDGET = 200


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("opt")
    args = ["--seeds", "1", "--budget", str(BUDGET), "--config", str(SMOKE), "--json"]
    args += ["--workers", "1", "--plot", str(tmp / "p.png"), "--runs-out", str(tmp / "runs.json")]
    for o in TINY:
        args += ["--set", o]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    return out, json.loads((tmp / "runs.json").read_text())


def test_json_contract(bench: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    out, _ = bench
    assert set(out["policies"]) == set(POLICIES)
    for s in out["policies"].values():
        for key in (
            "test_gain_mean",
            "test_gain_sd",
            "oracle_fraction",
            "harmful_surviving_per_run",
        ):
            assert isinstance(s[key], float | int), key
        assert set(s["accepted"]) == {"helpful", "neutral", "harmful"}
        assert all(isinstance(v, int) for v in s["accepted"].values())
        assert 0 < s["rollouts"] <= BUDGET
        assert s["tokens"] > 0
    assert out["plot"] is None or Path(out["plot"]).stat().st_size > 1000


def test_numbers_come_from_the_runs_and_the_oracle(
    bench: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    out, runs = bench
    assert len(runs) == len(POLICIES)
    for p in POLICIES:
        s, r = out["policies"][p], next(r for r in runs if r["policy"] == p)
        accepted = [g for g in r["gates"] if g["action"] == "accept"]
        # accepted edits split by ground truth sum to the accepted count
        assert sum(s["accepted"].values()) == s["accepted_total"] == len(accepted)
        for c in ("helpful", "neutral", "harmful"):
            assert s["accepted"][c] == sum(1 for g in accepted if g["truth"] == c)
        # ground truth = the sign of the oracle delta (0.1pp threshold)
        for g in r["gates"]:
            want = (
                "helpful" if g["delta"] > 1e-3 else "harmful" if g["delta"] < -1e-3 else "neutral"
            )
            assert g["truth"] == want
        # oracle fraction = (E[delivered] − E[seed]) / (E[optimal] − E[seed])
        frac = (r["expected_test_delivered"] - r["expected_test_seed"]) / (
            r["expected_test_optimal"] - r["expected_test_seed"]
        )
        assert math.isclose(s["oracle_fraction"], frac, abs_tol=1e-4)
        assert math.isclose(
            s["expected_test_gain_mean"],
            r["expected_test_delivered"] - r["expected_test_seed"],
            abs_tol=1e-4,
        )
        traj = [t["rollouts"] for t in r["trajectory"]]
        assert traj == sorted(traj) and traj[-1] == r["rollouts"] <= BUDGET
        # one seed: the headline figures are that run's own (observed gain on the test pool)
        assert r["observed_test_delivered"] is not None and r["observed_test_seed"] is not None
        assert math.isclose(
            s["test_gain_mean"],
            r["observed_test_delivered"] - r["observed_test_seed"],
            abs_tol=1e-4,
        )
        assert s["harmful_surviving_per_run"] == r["harmful_surviving_delivered"]
        assert (s["rollouts"], s["tokens"], s["epochs_completed"]) == (
            r["rollouts"],
            r["tokens"],
            r["epochs_completed"],
        )
    # accept_all accepts every proposal it sees; the optimum comes from the oracle on the test pool
    assert all(v in (None, 1.0) for v in out["policies"]["accept_all"]["accept_rate"].values())
    cfg = resolve_config(RunSpec("ce_gate", 0, BUDGET, str(SMOKE), TINY))
    ds = load_dataset(cfg)
    with tempfile.TemporaryDirectory() as d:
        pools = build_or_load_pools(cfg, ds.questions, Path(d) / "pools.json")
    assert cfg.ground_truth is not None
    world = load_world(cfg.ground_truth)
    assert math.isclose(
        runs[0]["expected_test_optimal"],
        best_expected_accuracy(world, pools.test, cfg.sim),
        abs_tol=1e-12,
    )


def test_issue15_criteria_are_recomputed_from_the_runs(
    bench: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """The verdict printed with the table equals one computed here from the runs file."""
    out, runs = bench
    c = out["criteria"]
    own = next(r for r in runs if r["policy"] == "ce_gate")
    gain = own["expected_test_delivered"] - own["expected_test_seed"]
    assert c["default_policy"] == "ce_gate" and set(c["paired_gain"]) == set(POLICIES) - {"ce_gate"}
    for other, g in c["paired_gain"].items():
        r = next(r for r in runs if r["policy"] == other)
        want = gain - (r["expected_test_delivered"] - r["expected_test_seed"])
        assert math.isclose(g["mean"], want, abs_tol=1e-12) and g["se"] is None
        assert g["seeds"] == 1 and c["checks"][f"gain >= {other}"] == (want >= 0)
    for how, key in (("effect", "truth"), ("kind", "kind")):
        neutral = [g for g in own["gates"] if g["decided"] and g[key] == "neutral"]
        taken = sum(1 for g in neutral if g["action"] == "accept")
        got = c["neutral"][how]
        assert (got["gated"], got["accepted"]) == (len(neutral), taken)
    # the kind is what the proposal carries (the simulator's catalogue), not its effect
    for g in own["gates"]:
        assert (g["kind"] == "harmful") == bool(g["harmful_lines"])
    assert c["harmful_surviving_per_run"] == {
        "effect": own["harmful_surviving_delivered"],
        "kind": own["harmful_kind_surviving_delivered"],
    }
    # one seed at a budget of 200: reported, never "met"
    assert "1 seed(s) < 5" in c["not_assessed"] and "budget 200 < 6000" in c["not_assessed"]
    assert c["met"] is (False if c["failed"] else None)


def test_paired_differences_and_their_standard_error() -> None:
    """Seeds are paired; a seed one policy lacks is left out; SE = sd of the differences / √n."""

    def run(policy: str, seed: int, gain: float, harmful: int = 0) -> dict[str, Any]:
        return {
            "policy": policy,
            "seed": seed,
            "expected_test_seed": 0.5,
            "expected_test_delivered": 0.5 + gain,
            "harmful_surviving_delivered": harmful,
            "gates": [
                {"decided": True, "truth": "neutral", "action": a}
                for a in ("accept", *["reject"] * (9 + 10 * seed))
            ]
            if policy == "ce_gate"
            else [],
        }

    runs = [run("ce_gate", s, g, h) for s, g, h in ((0, 0.05, 0), (1, 0.02, 0), (2, 0.04, 1))]
    runs += [run("accept_all", s, g) for s, g in ((0, 0.01), (1, 0.04), (3, 0.5))]
    c = criteria(runs, 6000)
    assert c is not None
    g = c["paired_gain"]["accept_all"]
    assert g["seeds"] == 2 and math.isclose(g["mean"], 0.01)  # (0.04 − 0.02) / 2
    assert math.isclose(g["se"], 0.03)  # sd of (0.04, −0.02) = 0.03·√2, over √2
    assert c["neutral"]["effect"] == {"gated": 60, "accepted": 3, "rate": 0.05}
    assert math.isclose(c["harmful_surviving_per_run"]["effect"], 1 / 3)
    # runs written before the kind was recorded: the kind-based bounds are not assessed
    assert c["harmful_surviving_per_run"]["kind"] is None
    assert c["checks"] == {
        "gain >= accept_all": True,
        "neutral accepted <= 3% (effect)": False,
        "harmful surviving <= 0.05/run (effect)": False,
        "neutral accepted <= 3% (kind)": None,
        "harmful surviving <= 0.05/run (kind)": None,
    }
    assert c["met"] is False and c["not_assessed"][-1] == "3 seed(s) < 5"
    assert "by kind: not recorded" in format_criteria(c)
    assert "not met: neutral accepted" in format_criteria(c)
    assert criteria([r for r in runs if r["policy"] != "ce_gate"]) is None
    # nothing to count is not a pass: no neutral gated and otherwise clean → not assessed
    clean = [
        {**r, "gates": [], "harmful_surviving_delivered": 0, "seed": r["seed"] + 10 * k}
        for k in range(2)
        for r in runs
    ]
    c = criteria(clean, 6000)
    assert c is not None and c["failed"] == [] and c["met"] is None
    assert "neutral accepted <= 3% (effect)" in c["not_assessed"]


def test_same_seed_same_numbers() -> None:
    spec = RunSpec("accept_all", 3, 120, str(SMOKE), TINY)
    a, b = execute(spec).to_dict(), execute(spec).to_dict()
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b


def test_first_seed_runs_the_seeds_it_names(tmp_path: Path) -> None:
    """`--first-seed 3 --seeds 2` runs seeds 3 and 4, each the run that seed gives directly."""
    args = ["--seeds", "2", "--first-seed", "3", "--budget", "120", "--config", str(SMOKE)]
    args += ["--json", "--workers", "1", "--policies", "accept_all", "--plot", str(tmp_path / "p")]
    args += ["--runs-out", str(tmp_path / "runs.json")]
    for o in TINY:
        args += ["--set", o]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["meta"]["first_seed"] == 3
    runs = sorted(json.loads((tmp_path / "runs.json").read_text()), key=lambda r: r["seed"])
    assert [r["seed"] for r in runs] == [3, 4]
    direct = execute(RunSpec("accept_all", 3, 120, str(SMOKE), TINY)).to_dict()
    got = dict(runs[0])
    got.pop("wall_s"), direct.pop("wall_s")
    assert json.loads(json.dumps(direct)) == got


def test_aa_candidates_are_noops_and_rate_has_an_interval() -> None:
    spec = RunSpec("minibatch_sum", 0, 5000, str(SMOKE), (*TINY, *AA_NOOP), max_gates=6)
    run = execute(spec).to_dict()
    decided = [g for g in run["gates"] if g["decided"]]
    assert len(decided) >= 6
    assert all(g["max_abs_question_delta"] <= 1e-12 for g in decided)
    s = summarize_aa([run], 0.05)
    assert s["gates"] == len(decided) and s["excluded_not_noop"] == 0
    assert s["ci_low"] <= s["rate"] <= s["ci_high"]


def test_wilson_and_sweep_mix() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi is not None and math.isclose(hi, 0.2775, abs_tol=1e-4)
    lo, hi = wilson(5, 100)
    assert lo is not None and hi is not None
    assert math.isclose(lo, 0.0215, abs_tol=1e-4) and math.isclose(hi, 0.1118, abs_tol=1e-4)
    assert wilson(0, 0) == (None, None)
    for share in (0.1, 0.2, 0.4, 0.6):
        cfg = load_config(SMOKE, sweep_mix(share), environ={}, dotenv_path=None)
        assert math.isclose(cfg.sim.proposal_mix.cue, share)
    default = load_config(SMOKE, sweep_mix(0.2), environ={}, dotenv_path=None).sim.proposal_mix
    assert default == load_config(SMOKE, (), environ={}, dotenv_path=None).sim.proposal_mix
    assert summarize([])["runs"] == 0


def test_overhead_ideal_and_cli() -> None:
    log = BarrierLog([(4,) * 10, (3,)])  # 40 calls over 10 rollouts; one 3-call rollout
    others = {"diagnose": 2, "evolve": 3, "momentum": 1, "system_tool": 0}
    # (max(40/8, 4) + max(3/8, 3)) + diag 1 per step × 2 + evolve 1 per step × 2 + momentum 1
    assert math.isclose(ideal_seconds(log, others, 2, 0.05, 8), (5 + 3 + 2 + 2 + 1) * 0.05)
    # Call slots taken first come, first served: 5,5,5 on 2 slots interleave into ⌈15/2⌉ = 8
    # latencies (whole rollouts per slot took 10; the bound says 7.5); 4,1,1,1,1 → 5, since the
    # long rollout's later calls queue behind the short ones' first (the bound says 4).
    assert makespan([5, 5, 5], 2) == 8 and makespan([4, 1, 1, 1, 1], 2) == 5
    assert makespan([3], 8) == 3 and makespan([], 4) == 0 and makespan([1, 3], 1) == 4
    assert makespan([4] * 72, 32) == 9  # R on the smoke pool: three rollout waves took 12
    sched = BarrierLog([(5, 5, 5)])
    assert math.isclose(schedule_seconds(sched, others, 2, 0.05, 2), (8 + 2 + 2 + 1) * 0.05)
    assert ideal_seconds(sched, others, 2, 0.05, 2) < schedule_seconds(sched, others, 2, 0.05, 2)
    args = ["--json", "--skip-dagster", "--small", "--latency-ms", "20", "--concurrency", "8"]
    res = CliRunner().invoke(overhead_cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    (cell,) = out["epoch"]
    assert cell["latency_ms"] == 20 and cell["concurrency"] == 8
    assert cell["ideal_s"] > 0 and cell["ratio"] >= 1.0 and cell["llm_calls"] > 0
    assert cell["ideal_s"] <= cell["schedule_s"] <= cell["wall_s"]
    assert out["dagster"] is None


@pytest.mark.parametrize("sigterm", ["default", "blocked_and_ignored"])
def test_optimizer_workers_die_with_a_killed_bench(tmp_path: Path, sigterm: str) -> None:
    """SIGKILL of the bench process stops its worker processes (no orphans finishing runs),
    also when the bench inherited SIGTERM blocked and ignored (masks and SIG_IGN survive
    ``exec``: in the suite's xdist workers a SIGTERM-based death signal was never delivered)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import multiprocessing as mp, os, sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from trm_bench.optimizer import die_with_parent\n"
        "import signal\n"
        "if __name__ == '__main__':\n"
        f"    if {sigterm == 'blocked_and_ignored'}:\n"
        "        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    ctx = mp.get_context('spawn')\n"
        "    with ProcessPoolExecutor(1, mp_context=ctx, initializer=die_with_parent,\n"
        "                             initargs=(os.getpid(),)) as pool:\n"
        "        print(pool.submit(os.getpid).result(), flush=True)\n"
        "        pool.submit(time.sleep, 60)\n"
        "        time.sleep(60)\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    worker = int(proc.stdout.readline())
    born = _process_state(worker)
    assert born is not None and born[0] != "Z"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = _process_state(worker)
        # gone, a zombie (exited; this container's init reaps orphans late), or the pid reused
        if now is None or now[0] == "Z" or now[1] != born[1]:
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    raise AssertionError(f"worker {worker} outlived its killed parent")


def _process_state(pid: int) -> tuple[str, str] | None:
    """(state letter, start time) of a process from ``/proc``, or None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], fields[19]  # state; starttime (field 22 of proc(5))


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("seed=5", "--set seed: the benchmark sets it for every run; use --first-seed"),
        ("sim.seed=5", "--set sim.seed: the benchmark sets it for every run"),
        ("gate_policy=accept_all", "use --policies"),
        ("rollout_budget=99", "use --budget"),
        ("sim=3", "sim: Input should be a valid dictionary"),  # the user's key, not the bench's
    ],
)
def test_run_keys_in_set_are_refused_before_any_run(override: str, says: str) -> None:
    """A --set of a key the benchmark sets per run was silently overwritten (review)."""
    res = CliRunner().invoke(cli, ["--quick", "--seeds", "1", "--set", override])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output


def test_a_cue_the_type_already_reads_elsewhere_is_not_a_cue_edit() -> None:
    """The kind compared cues within the edited skill file only: a cue already in the system
    prompt, added to the skill, was a "cue" edit with Δ = 0 (review)."""
    from types import SimpleNamespace

    from trm_assets.domain.question import skill_file_name
    from trm_assets.llm.sim.oracle import active_texts, expected_by_question
    from trm_assets.llm.sim_config import SimConfig
    from trm_bench.optimizer_run import GateRecorder

    world = load_world(REPO / "data" / "smoke")
    tt = sorted(world.truth.task_types)[0]
    cue = world.truth.task_types[tt].cues[0].phrasings[0]
    skill, cfg = skill_file_name(tt), SimConfig()
    qids = tuple(sorted(q for q, x in world.questions.items() if x.task_type == tt))

    def kind_and_truth(system: str) -> tuple[str, str]:
        class Oracle:
            def __init__(self) -> None:
                self.world, self.by_type = world, {tt: qids}

            def per_question(self, q: Any, skills: Any, pv: str) -> dict[str, float]:
                return expected_by_question(world, q, skills, cfg, system_prompt=system)

            def cues_read(self, t: str, skills: Any, pv: str) -> set[str]:
                return world.cues_expressed(t, active_texts(t, skills, system_prompt=system))

        rec = GateRecorder(Oracle())  # type: ignore[arg-type]
        base = "# skill\n## Strategy\n- look closely\n"
        req = SimpleNamespace(
            task_type=tt, skill_file=skill, baseline_skills={skill: base},
            candidate_text=f"{base}- {cue}\n", prompts_version="v1", epoch=0, step=0,
        )  # fmt: skip
        out = SimpleNamespace(
            baseline_rollouts=0, candidate_rollouts=0, wins=0, losses=0, action="accept",
            verdict="ACCEPT",
        )  # fmt: skip
        rec.record(req, out)  # type: ignore[arg-type]
        return rec.records[-1].kind, rec.records[-1].truth

    assert kind_and_truth(f"You answer questions about videos.\n- {cue}\n") == (
        "neutral",
        "neutral",
    )
    assert kind_and_truth("You answer questions about videos.\n") == ("cue", "helpful")


def test_an_aa_key_in_set_is_refused_before_any_run() -> None:
    """`--aa --set test_size=12` replaced the user's 12 with the audit's 60 and then failed on
    "test_size + val_size: 132 leaves no diagnosis question", blaming the user (review)."""
    res = CliRunner().invoke(cli, ["--aa", "--quick", "--seeds", "1", "--set", "test_size=12"])
    assert res.exit_code == 2, res.output
    assert "--aa sets test_size=60 itself" in res.output and "drop --set test_size=12" in res.output
    assert "diagnosis question" not in res.output
