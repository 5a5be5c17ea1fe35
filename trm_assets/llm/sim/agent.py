"""The simulated agent: explores the video tree with real tool calls, then answers.

Per question the answer is fixed by one hash draw (docs/decision-simulator-randomness.md,
docs/decision-sim-decoding-profiles.md)::

    temperature > 0:  u = H(sim seed, question id, normalized instruction text, sample index)
    temperature = 0:  u = H(sim seed, question id)
    sim.temperature_scale τ > 0, T > 0:  u = Φ(√r·Φ⁻¹(u_greedy) + √(1 − r)·Φ⁻¹(u_fresh)),
                      r = exp(−(T/τ)²): a low temperature nearly replays the greedy answer
    correct  ⇔  u < P_eff(question, instruction text)          (oracle.question_probability)

* *instruction text* = every system message (agent prompt + skill blocks) plus the tool
  descriptions of the request: what a real model reads as instructions.
* *temperature* = the request's ``temperature``; a request naming none is decoded at the profile's
  ``sim.agent_temperature`` (``default`` 1.0, ``realistic`` 0).
* Above 0, as in issue 4: the same content and sample index reproduce the draw, any change of
  either redraws. *sample index* = the request's ``seed`` (``None`` → 0); the AgentLoop passes
  ``rollout_seed(run_id, question_id, replicate)``, so replicates and runs differ reproducibly.
* At 0 the reply is a function of the conversation alone, like a real server's greedy decoding:
  the sample index is ignored, and texts differ only through ``P_eff`` (their cue, harm, length
  and, with ``text_flip_rate``, their own perturbation).
* A wrong draw picks one of the three wrong letters from the same hash keys.

The exploration plan (overview → keyword search → the evidence's segment/OCR/subtitles → answer)
is driven by the conversation so far: one tool call per turn, the step being the number of earlier
assistant turns with tool calls. It does not change the answer (the oracle stays exact). A plan
uses at most five model calls (four tools + ``answer``); with ``max_agent_steps`` below that the
agent runs out of steps and the observed accuracy falls below the oracle's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from trm_assets.domain.question import LETTERS
from trm_assets.llm.sim.decoding import correlated_unit, draw_correlation, is_greedy
from trm_assets.llm.sim.draws import below, digest, normalize_text, unit
from trm_assets.llm.sim.oracle import question_probability
from trm_assets.llm.sim.roles import SimReply, content_text, question_id_of_agent_prompt
from trm_assets.llm.sim.world import QuestionTruth, SimWorld
from trm_assets.llm.sim_config import SimConfig

_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "is",
        "are",
        "was",
        "were",
        "does",
        "do",
        "did",
        "what",
        "which",
        "who",
        "why",
        "how",
        "when",
        "where",
        "while",
        "with",
        "for",
        "from",
        "by",
        "and",
        "or",
        "most",
        "likely",
        "video",
        "shown",
        "right",
        "after",
        "this",
        "that",
        "it",
    ]
)
_MALFORMED_AGENT_TEXTS = (
    "hmm, the evidence is not clear to me yet, let me think again",
    "i could not decide between the options",
    '{"tool": "answer", "letter": ',
)


def tool_descriptions(tools: Sequence[dict[str, Any]] | None) -> list[str]:
    """The description texts of OpenAI function-tool specs (sorted by tool name)."""
    out: list[tuple[str, str]] = []
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else {}
        if isinstance(fn, dict):
            out.append((str(fn.get("name", "")), str(fn.get("description", ""))))
    return [d for _, d in sorted(out)]


def tool_names(tools: Sequence[dict[str, Any]] | None) -> set[str]:
    names: set[str] = set()
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else {}
        if isinstance(fn, dict) and fn.get("name"):
            names.add(str(fn["name"]))
    return names


def instruction_texts(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> list[str]:
    """What the agent reads as instructions: system messages and tool descriptions."""
    system = [
        content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    ]
    return [*system, *tool_descriptions(tools)]


def agent_draw(
    world: SimWorld,
    config: SimConfig,
    question_id: str,
    texts: Sequence[str],
    sample: int,
    *,
    temperature: float | None = None,
) -> tuple[str, bool, float]:
    """(letter, correct, P_eff) of one rollout of ``question_id`` given ``texts``.

    ``temperature`` None → ``config.agent_temperature``; at 0 ``sample`` is ignored.
    """
    q = world.question(question_id)
    norms = [normalize_text(t) for t in texts]
    relevant = digest(*norms)
    # The hash keys of a draw: issue 4's (text, sample) above 0; the text alone at 0.
    keys: tuple[object, ...] = (relevant, sample)
    correlated = False
    if is_greedy(config, temperature):
        keys = ("greedy", relevant)
        u = unit(config.seed, "agent-greedy", question_id)
    else:
        u = unit(config.seed, "agent", question_id, relevant, sample)
        r = draw_correlation(config, temperature)
        if r > 0.0:  # sim.temperature_scale: a low temperature leans on the greedy draw
            u = correlated_unit(unit(config.seed, "agent-greedy", question_id), u, r)
            correlated = True
    if q is None:  # a question the world does not know: a pure guess
        if correlated:  # the letter, too, nearly replays at a low temperature
            return LETTERS[min(3, int(4 * u))], False, config.guess
        letter = LETTERS[below(4, config.seed, "guess", question_id, *keys)]
        return letter, False, config.guess
    p = question_probability(world, question_id, texts, config)
    if u < p:
        return q.answer, True, p
    wrong = [x for x in LETTERS if x != q.answer]
    if correlated:  # u is uniform on [p, 1) here: its position picks the wrong letter
        return wrong[min(2, int(3 * (u - p) / (1.0 - p)))], False, p
    return wrong[below(3, config.seed, "wrong", question_id, *keys)], False, p


def _keywords(question_text: str) -> str:
    words = [w for w in re.findall(r"[a-z]+", question_text.lower()) if w not in _STOPWORDS]
    return " ".join(words[-4:]) or "main event"


def _plan(q: QuestionTruth, question_text: str, harm: bool) -> list[tuple[str, dict[str, Any]]]:
    ev = q.evidence
    steps: list[tuple[str, dict[str, Any]]] = [("get_overview", {})]
    if ev.kind == "summary":
        steps.append(("get_captions", {"start": 0.0, "end": ev.end, "level": "segment"}))
        return steps
    steps.append(("search_captions", {"query": _keywords(question_text), "k": 5}))
    if harm:  # a harmful directive makes the agent cut its exploration short
        return steps
    if ev.kind == "ocr":
        steps.append(("get_ocr", {"start": ev.start, "end": ev.end}))
    elif ev.kind == "subtitle":
        steps.append(("get_subtitles", {"start": ev.start, "end": ev.end}))
    elif ev.segment_id:
        steps.append(("expand_node", {"node_id": ev.segment_id}))
    if q.task_type in ("Spatial Perception", "Attribute Perception"):
        steps.append(
            ("inspect_frames", {"question": question_text, "start": ev.start, "end": ev.end})
        )
    return steps


def _tool_call_turns(messages: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Names of the tools called in each earlier assistant turn."""
    turns: list[list[str]] = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            names = []
            for c in m["tool_calls"]:
                fn = c.get("function", {}) if isinstance(c, dict) else {}
                names.append(str(fn.get("name", "")) if isinstance(fn, dict) else "")
            turns.append(names)
    return turns


def agent_reply(
    world: SimWorld,
    config: SimConfig,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    sample: int,
    temperature: float | None = None,
    *,
    conv_key: str | None = None,
) -> SimReply:
    """The next assistant turn of the simulated agent (``temperature``: see :func:`agent_draw`).

    ``conv_key``: the digest of the messages' canonical JSON, when the caller has it already."""
    qid = question_id_of_agent_prompt(messages)
    texts = instruction_texts(messages, tools)
    user = next((content_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    if conv_key is None:
        conv_key = digest(*(json.dumps(m, sort_keys=True, default=str) for m in messages))
    # A greedy decoder that garbles a conversation garbles it every time.
    fault_keys = ("greedy",) if is_greedy(config, temperature) else (sample,)
    if unit(config.seed, "malformed", conv_key, *fault_keys) < config.fault_malformed_rate:
        text = _MALFORMED_AGENT_TEXTS[
            below(len(_MALFORMED_AGENT_TEXTS), config.seed, "mal-text", conv_key)
        ]
        return SimReply(text, label="agent:malformed")

    letter, correct, _ = agent_draw(world, config, qid, texts, sample, temperature=temperature)
    verdict = "correct" if correct else "wrong"
    turns = _tool_call_turns(messages)
    available = tool_names(tools)
    if turns and "answer" in turns[-1]:
        # The client sent the answer tool's result back: close with the bare letter.
        return SimReply(letter, label=f"agent:final:{verdict}")
    if "answer" not in available:
        return SimReply(letter, label=f"agent:text-answer:{verdict}")

    q = world.question(qid)
    plan: list[tuple[str, dict[str, Any]]] = []
    if q is not None:
        question_text = re.sub(r"^\s*Question:\s*", "", _line(user, "Question:"))
        harm = world.harm_present(q.task_type, texts)
        plan = [(n, a) for n, a in _plan(q, question_text, harm) if n in available]
    step = len(turns)
    if step < len(plan):
        name, args = plan[step]
        return SimReply(
            _THOUGHTS.get(name, "Let me check the video."),
            [(name, json.dumps(args, sort_keys=True))],
            label=f"agent:tool:{name}",
        )
    return SimReply(
        "I have enough evidence to answer.",
        [("answer", json.dumps({"letter": letter}))],
        label=f"agent:answer:{verdict}",
    )


def _line(text: str, prefix: str) -> str:
    for ln in text.splitlines():
        if ln.strip().startswith(prefix):
            return ln.strip()
    return ""


_THOUGHTS = {
    "get_overview": "Let me get an overview of the video first.",
    "search_captions": "I will search the captions for the key words of the question.",
    "expand_node": "This segment looks relevant; let me expand it.",
    "get_ocr": "The question is about on-screen text; let me read the OCR of that clip.",
    "get_subtitles": "Let me read what is said around that moment.",
    "get_captions": "Let me read the segment summaries.",
    "inspect_frames": "Let me look at the frames to confirm.",
}
