"""What ``trm bench real-model`` reports, read from three independent records:

* the **wire** (:mod:`trm_bench.real_model_proxy`): every request the loop sent and what the
  server answered — model calls by role, protocol errors (any non-200 answer), tokens from the
  responses' ``usage``, the agent's reply shapes (tool calls, text, empty), and the parse outcome
  of every structured reply (diagnose, evolve, momentum): **parsed** (the first reply was the
  requested JSON), **repaired** (the first was not, the repair retry was), **refused** (neither);
* the workspace's **run log** (DuckDB, opened read-only): one row per rollout in
  ``predictions``, the gate decisions in ``step_report``, the ledger in ``state.json``;
* the **server log**: llama.cpp's own prompt-processing and generation timings.

Rollout outcomes are a partition of ``predictions`` (first match wins): ``infra`` (an
infrastructure failure after retries), ``aborted`` (stopped by a bug or a configuration error),
``context_length``, ``answered`` (a letter, right or wrong), ``malformed`` (no letter and at least
one invalid tool call: bad JSON arguments, an unknown tool, ``answer`` without a letter),
``no_answer`` (no letter otherwise: text without a letter, or ``max_steps``).

Why it is long: it classifies every wire call and rollout of a real-model run (roles,
structured-output repairs, usage, outcomes, gate decisions, the server log), one partition each,
kept together so that the report's totals add up.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from trm_assets.domain.edit_schema import EditProposal
from trm_assets.evolution.calls import REPAIR_INSTRUCTION, parse_json_reply
from trm_assets.evolution.schemas import DiagnosisReport, MomentumGuidance
from trm_bench.real_model_proxy import WireCall

#: Template file of each structured role (its first line identifies the role's requests).
STRUCTURED_TEMPLATES: Final[dict[str, str]] = {
    "diagnose": "diagnose.md",
    "evolve_skill": "evolve_skill.md",
    "evolve_system": "evolve_system.md",
    "evolve_tool": "evolve_tool.md",
    "momentum": "momentum.md",
}
SCHEMAS: Final[dict[str, type[BaseModel]]] = {
    "diagnose": DiagnosisReport,
    "evolve_skill": EditProposal,
    "evolve_system": EditProposal,
    "evolve_tool": EditProposal,
    "momentum": MomentumGuidance,
}
_REPAIR_PREFIX: Final = REPAIR_INSTRUCTION.split("{", 1)[0]
_TEXT_TOOL_CALL: Final = re.compile(r'\{\s*"(?:tool|name)"\s*:')
ROLLOUT_OUTCOMES: Final = (
    "answered", "no_answer", "malformed", "context_length", "infra", "aborted",
)  # fmt: skip


def template_headings(prompts_dir: Path) -> dict[str, str]:
    """The first line of each structured template: ``{"diagnose": "# Diagnose failed …"}``."""
    out: dict[str, str] = {}
    for role, name in STRUCTURED_TEMPLATES.items():
        text = (prompts_dir / name).read_text(encoding="utf-8")
        out[role] = text.strip().splitlines()[0].strip()
    return out


def _messages(call: WireCall) -> list[dict[str, Any]]:
    req = call.request if isinstance(call.request, dict) else {}
    msgs = req.get("messages")
    return msgs if isinstance(msgs, list) else []


def request_role(request: Any, headings: Mapping[str, str]) -> str:
    """``agent`` (a chat request with tools, or — in the text tool mode, which sends none — one
    that opens with a system message: structured calls send one user message), a structured role
    (its first message starts with the role's template heading) or ``other``."""
    req = request if isinstance(request, dict) else {}
    if req.get("tools"):
        return "agent"
    msgs = req.get("messages")
    head_msg = msgs[0] if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) else {}
    if head_msg.get("role") == "system":
        return "agent"
    first = head_msg.get("content")
    if isinstance(first, str):
        head = first.strip()
        for role, heading in headings.items():
            if head.startswith(heading):
                return role
    return "other"


def call_role(call: WireCall, headings: Mapping[str, str]) -> str:
    """:func:`request_role` of a recorded call, or ``models`` for ``GET /v1/models``."""
    if call.path.rstrip("/").endswith("/models"):
        return "models"
    return request_role(call.request, headings)


# ------------------------------------------------------------------------------------------------
# the bench's one change to the requests: schema-constrained structured replies

#: Per structured role: (most items of any array, most characters of any free string). Small on
#: purpose: a grammar-constrained token costs several times an unconstrained one on this CPU.
OUTPUT_BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "diagnose": (2, 160),  # the bench's batch has 2 questions: at most 2 cases per call
    "evolve_skill": (1, 160),  # the bench's edit budget is 1
    "evolve_system": (1, 160),
    "evolve_tool": (1, 160),
    "momentum": (1, 300),
}


def bounded_schema(model: type[BaseModel], *, max_items: int, max_chars: int) -> dict[str, Any]:
    """``model``'s JSON schema, every property required, every array 1..``max_items`` long and
    every free string 1..``max_chars`` characters: as a llama.cpp grammar it makes the model emit
    one complete, bounded object of the shape the loop validates (and then stop).

    Two cross-field rules of the loop's validators become variants, so a grammar-conforming
    reply is also a valid one: an edit (``$defs.Edit``) is ``add`` with ``anchor: null`` or
    ``replace``/``delete`` with an anchor (a free-form anchor on ``add`` almost never matches a
    line of the file, so the edit would never apply and no gate would ever run); a diagnosis
    (``$defs.Diagnosis``) targets ``skill``/``system`` with ``tool_name: null`` or ``tool`` with
    a tool name.
    """

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for v in node:
                walk(v)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") == "object" and isinstance(node.get("properties"), dict):
            node["required"] = list(node["properties"])
        if node.get("type") == "array":
            node.update(minItems=1, maxItems=max_items)
        if node.get("type") == "string" and "enum" not in node:
            node.update(minLength=1, maxLength=max_chars)
        for v in node.values():
            walk(v)

    schema = model.model_json_schema()
    walk(schema)
    edit = schema.get("$defs", {}).get("Edit")
    if edit is not None:
        props = edit["properties"]
        text = props["anchor"]["anyOf"][0]
        add = {**edit, "properties": {**props, "op": {"const": "add"}, "anchor": {"type": "null"}}}
        change = {
            **edit,
            "properties": {**props, "op": {"enum": ["replace", "delete"]}, "anchor": text},
        }
        schema["$defs"]["Edit"] = {"anyOf": [add, change]}
    diagnosis = schema.get("$defs", {}).get("Diagnosis")
    if diagnosis is not None:
        props = diagnosis["properties"]
        name = props["tool_name"]["anyOf"][0]
        not_tool = {
            **diagnosis,
            "properties": {
                **props, "target": {"enum": ["skill", "system"]}, "tool_name": {"type": "null"}
            },
        }  # fmt: skip
        tool = {
            **diagnosis,
            "properties": {**props, "target": {"const": "tool"}, "tool_name": name},
        }
        schema["$defs"]["Diagnosis"] = {"anyOf": [not_tool, tool]}
    return schema


def structured_output_rewrite(
    headings: Mapping[str, str],
) -> Callable[[Any], tuple[Any, str] | None]:
    """The proxy hook that adds ``response_format: {"type": "json_object", "schema": …}`` (the
    role's :func:`bounded_schema`) to every structured request the loop sends without one;
    agent requests (with tools) pass unchanged."""
    schemas = {
        role: bounded_schema(SCHEMAS[role], max_items=n, max_chars=c)
        for role, (n, c) in OUTPUT_BOUNDS.items()
    }

    def rewrite(body: Any) -> tuple[Any, str] | None:
        if not isinstance(body, dict) or "response_format" in body:
            return None
        role = request_role(body, headings)
        if role not in schemas:
            return None
        fmt = {"type": "json_object", "schema": schemas[role]}
        note = f"response_format json_object, bounded {SCHEMAS[role].__name__} schema"
        return {**body, "response_format": fmt}, note

    return rewrite


def is_repair(call: WireCall) -> bool:
    """The structured call's second attempt (the loop appends the repair instruction)."""
    msgs = _messages(call)
    last = msgs[-1].get("content") if msgs and isinstance(msgs[-1], dict) else None
    return len(msgs) >= 3 and isinstance(last, str) and last.startswith(_REPAIR_PREFIX)


def reply_message(call: WireCall) -> dict[str, Any]:
    resp = call.response if isinstance(call.response, dict) else {}
    try:
        msg = resp["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return {}
    return msg if isinstance(msg, dict) else {}


def reply_usage(call: WireCall) -> tuple[int, int]:
    resp = call.response if isinstance(call.response, dict) else {}
    u = resp.get("usage") or {}
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


def wire_summary(calls: Sequence[WireCall], headings: Mapping[str, str]) -> dict[str, Any]:
    """Model calls, protocol errors, tokens, reply shapes and structured outcomes."""
    chat = [c for c in calls if c.path.rstrip("/").endswith("/chat/completions")]
    roles = {c.seq: call_role(c, headings) for c in chat}
    by_role: Counter[str] = Counter(roles.values())
    errors = [c for c in chat if c.status != 200]
    statuses = Counter(str(c.status) for c in errors)
    examples: list[dict[str, Any]] = []
    seen: set[str] = set()
    for c in errors:
        key = f"{c.status}:{(c.error_excerpt or '')[:120]}"
        if key in seen or len(examples) >= 3:
            continue
        seen.add(key)
        msgs = _messages(c)
        examples.append(
            {
                "status": c.status,
                "role": roles[c.seq],
                "n_messages": len(msgs),
                "message_roles": [m.get("role") for m in msgs if isinstance(m, dict)],
                "server_said": c.error_excerpt,
            }
        )
    tokens: dict[str, dict[str, int]] = {}
    latency: dict[str, float] = {}
    for c in chat:
        if c.status != 200:
            continue
        pt, ct = reply_usage(c)
        t = tokens.setdefault(roles[c.seq], {"prompt": 0, "completion": 0})
        t["prompt"] += pt
        t["completion"] += ct
        latency[roles[c.seq]] = latency.get(roles[c.seq], 0.0) + c.latency_s
    shapes: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    for c in chat:
        if c.status != 200 or roles[c.seq] != "agent":
            continue
        msg = reply_message(c)
        resp = c.response if isinstance(c.response, dict) else {}
        finish[str((resp.get("choices") or [{}])[0].get("finish_reason"))] += 1
        text = (msg.get("content") or "").strip()
        if msg.get("tool_calls"):
            shapes["tool_calls"] += 1
        elif _TEXT_TOOL_CALL.search(text):  # the text tool mode's {"tool": NAME, ...}
            shapes["text_tool_call"] += 1
        elif text:
            shapes["text_only"] += 1
        else:
            shapes["empty"] += 1
    return {
        "model_calls": len(chat),
        "by_role": dict(sorted(by_role.items())),
        "protocol_errors": {
            "count": len(errors),
            "by_status": dict(sorted(statuses.items())),
            "examples": examples,
        },
        "tokens": {
            "prompt": sum(t["prompt"] for t in tokens.values()),
            "completion": sum(t["completion"] for t in tokens.values()),
            "by_role": dict(sorted(tokens.items())),
        },
        "latency_s_by_role": {k: round(v, 1) for k, v in sorted(latency.items())},
        "agent_replies": {"shapes": dict(sorted(shapes.items())), "finish": dict(finish)},
        "structured": structured_outcomes(chat, roles),
    }


def structured_outcomes(
    chat: Iterable[WireCall], roles: Mapping[int, str]
) -> dict[str, dict[str, int]]:
    """Per structured role: parsed / repaired / refused (see the module docstring); a call
    whose answer was not a 200 counts as ``failed``."""
    out: dict[str, dict[str, int]] = {}
    for c in chat:
        role = roles[c.seq]
        schema = SCHEMAS.get(role)
        if schema is None:
            continue
        row = out.setdefault(role, {"parsed": 0, "repaired": 0, "refused": 0, "failed": 0})
        if c.status != 200:
            row["failed"] += 1
            continue
        value, _ = parse_json_reply(reply_message(c).get("content"), schema)
        if not is_repair(c):
            row["parsed"] += value is not None
        elif value is not None:
            row["repaired"] += 1
        else:
            row["refused"] += 1
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------
# the run log


def rollout_outcome(row: Mapping[str, Any]) -> str:
    """The partition of the module docstring for one ``predictions`` row."""
    if row.get("failure_kind") == "infra":
        return "infra"
    stop = row.get("stop_reason")
    if stop == "error":
        return "aborted"
    if stop == "context_length":
        return "context_length"
    if row.get("predicted"):
        return "answered"
    if (row.get("n_tool_errors") or 0) > 0:
        return "malformed"
    return "no_answer"


def rollout_summary(predictions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    counts = Counter(rollout_outcome(r) for r in predictions)
    by_kind: dict[str, int] = dict(Counter(str(r.get("kind")) for r in predictions))
    correct = sum(1 for r in predictions if r.get("correct") is True)
    scored = sum(1 for r in predictions if r.get("correct") is not None)
    n = len(predictions)
    # temperature 0: an evaluation question whose prompt was already rolled out is served from
    # that rollout (no model call); per-rollout figures are over the rollouts that ran
    reused = sum(1 for r in predictions if r.get("reused"))
    ran = n - reused
    calls = sum(int(r.get("n_llm_calls") or 0) for r in predictions)
    pt = sum(int(r.get("prompt_tokens") or 0) for r in predictions)
    ct = sum(int(r.get("completion_tokens") or 0) for r in predictions)
    return {
        "total": n,
        "reused": reused,
        **{k: counts.get(k, 0) for k in ROLLOUT_OUTCOMES},
        "correct": correct,
        "accuracy": round(correct / scored, 3) if scored else None,
        "tool_errors": sum(int(r.get("n_tool_errors") or 0) for r in predictions),
        "stop_reasons": dict(
            sorted(Counter(str(r.get("stop_reason")) for r in predictions).items())
        ),
        "by_run_kind": dict(sorted(by_kind.items())),
        "model_calls": calls,
        "calls_per_rollout": round(calls / ran, 2) if ran else None,
        "prompt_tokens": pt,
        "completion_tokens": ct,
        "tokens_per_rollout": round((pt + ct) / ran) if ran else None,
    }


def read_run_log(run_db: Path) -> dict[str, list[dict[str, Any]]]:
    """``predictions`` (with the run's kind) and ``step_report``, read-only."""
    from trm_assets.harness.storage.runlog import RunLogReader

    with RunLogReader.open(run_db) as reader:
        tables = {r["t"] for r in reader.query("SELECT table_name AS t FROM duckdb_tables()")}
        preds = reader.query(
            "SELECT p.run_id, r.kind, p.question_id, p.task_type, p.predicted, p.correct, "
            "p.stop_reason, p.failure_kind, p.error, p.n_llm_calls, p.n_tool_calls, "
            "p.n_tool_errors, p.prompt_tokens, p.completion_tokens, p.latency_s, "
            "EXISTS (SELECT 1 FROM flags f WHERE f.run_id = p.run_id AND f.question_id = "
            "p.question_id AND f.replicate = p.replicate AND f.kind = 'reuse') AS reused "
            "FROM predictions p JOIN runs r USING (run_id) ORDER BY p.run_id, p.question_id"
        )
        steps = (
            reader.query("SELECT * FROM step_report ORDER BY epoch, step, skill_file")
            if "step_report" in tables
            else []
        )
    return {"predictions": preds, "step_report": steps}


def gate_decisions(step_report: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every skill file of every step: what the step did and, for a gate, its verdict."""
    keys = (
        "epoch", "step", "skill_file", "action", "verdict", "wins", "losses", "blocks",
        "candidate_rollouts", "baseline_rollouts", "cache_hits", "n_edits", "n_applied", "detail",
    )  # fmt: skip
    return [{k: r.get(k) for k in keys} for r in step_report]


def infra_examples(predictions: Sequence[Mapping[str, Any]], limit: int = 3) -> list[str]:
    seen: list[str] = []
    for r in predictions:
        err = r.get("error")
        if err and err not in seen:
            seen.append(str(err)[:400])
        if len(seen) >= limit:
            break
    return seen


# ------------------------------------------------------------------------------------------------
# the server log

_PERF = re.compile(
    r"(?P<what>prompt eval|eval) time =\s*(?P<ms>[\d.]+) ms /\s*(?P<n>\d+) (?:tokens|runs)"
)
_ACCESS = re.compile(r'"(?:GET|POST) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


def server_log_summary(text: str) -> dict[str, Any]:
    """llama.cpp's timings (prompt processing and generation) and the HTTP status counts."""
    sums = {"prompt eval": [0.0, 0], "eval": [0.0, 0]}
    for m in _PERF.finditer(text):
        s = sums[m.group("what")]
        s[0] += float(m.group("ms"))
        s[1] += int(m.group("n"))
    statuses = Counter(m.group("status") for m in _ACCESS.finditer(text))

    def rate(key: str) -> float | None:
        ms, n = sums[key]
        return round(n / (ms / 1000.0), 1) if ms > 0 else None

    return {
        "prompt_tokens_evaluated": sums["prompt eval"][1],
        "prompt_eval_s": round(sums["prompt eval"][0] / 1000.0, 1),
        "prompt_tokens_per_s": rate("prompt eval"),
        "generated_tokens": sums["eval"][1],
        "generation_s": round(sums["eval"][0] / 1000.0, 1),
        "generated_tokens_per_s": rate("eval"),
        "http_status": dict(sorted(statuses.items())),
    }
