"""The simulated diagnose / evolve / momentum model: reads the rendered template, answers in the
real JSON formats (prompts/*.md), with the mix of good, neutral, harmful and malformed outputs
set by :class:`~trm_assets.llm.sim_config.SimConfig`.

What it reads is only what the template shows a real model: the task type and skill file lines,
the current text block, the question ids in ``<cases>`` (and the momentum categories), and the
``<rejected_edits>`` block. What it *knows* is the world's ground truth, which is how the simulator
models a competent-but-unreliable proposer:

* **cue** (``proposal_mix.cue``): an edit expressing the hidden cue of one failing case whose cue
  the current text does not yet express (none left → a neutral edit);
* **neutral**: plausible advice that changes nothing;
* **harmful**: a harmful directive of the case's task type;
* **malformed**: output that is not a valid edit JSON (a task failure for the caller).

The category and every choice inside it are hash draws of (sim seed, role, normalized prompt,
sample index = ``seed``), so the same prompt reproduces and any change redraws.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trm_assets.llm.sim.catalogue import CUE_FRAMES, HARM_FRAMES, NEUTRAL_FRAMES
from trm_assets.llm.sim.draws import below, digest, normalize_text, pick, shuffled, unit
from trm_assets.llm.sim.roles import Role, SimReply, block, line_value, question_ids_in
from trm_assets.llm.sim.world import SimWorld
from trm_assets.llm.sim_config import SimConfig

PROPOSAL_KINDS: tuple[str, ...] = ("cue", "neutral", "harmful", "malformed")
_TOOL_FOR_EVIDENCE = {
    "ocr": "get_ocr",
    "subtitle": "get_subtitles",
    "caption": "expand_node",
    "summary": "get_overview",
}
_EVIDENCE_WORDS = {
    "ocr": "on-screen text (OCR)",
    "subtitle": "subtitles",
    "caption": "clip caption",
    "summary": "video and segment summaries",
}


def draw_proposal_kind(config: SimConfig, *keys: object) -> str:
    """One of :data:`PROPOSAL_KINDS`, drawn with the configured proposal mix."""
    mix = config.proposal_mix
    u = unit(config.seed, "proposal-kind", *keys)
    acc = 0.0
    for kind, w in zip(
        PROPOSAL_KINDS, (mix.cue, mix.neutral, mix.harmful, mix.malformed), strict=True
    ):
        acc += w
        if u < acc:
            return kind
    return "neutral"


def _sentence(frames: Sequence[str], phrase: str, task_type: str | None, *keys: object) -> str:
    usable = [f for f in frames if task_type or "{task}" not in f]
    frame = pick(usable, *keys)
    p = phrase.rstrip(".")
    return frame.format(p=p, P=p[:1].upper() + p[1:], task=(task_type or "").lower())


def _fresh(candidates: Sequence[str], avoid: Sequence[str]) -> str | None:
    """The first candidate whose normalized text is in none of the ``avoid`` texts."""
    norms = [normalize_text(a) for a in avoid]
    for c in candidates:
        n = normalize_text(c)
        if not any(n in a for a in norms):
            return c
    return None


class _Context:
    """The parts of a rendered evolve/momentum prompt the simulator uses."""

    def __init__(self, world: SimWorld, role: Role, text: str) -> None:
        self.role = role
        self.text = text
        tt = line_value(text, "Task type")
        skill_file = line_value(text, "Skill file")
        if tt not in world.truth.task_types:
            tt = world.skill_file_to_task.get(skill_file, "")
        self.task_type: str | None = tt or None
        self.skill_file = skill_file
        if role == "evolve_system":
            self.current = block(text, "current_system_prompt")
        elif role == "evolve_tool":
            self.current = block(text, "current_tool")
        else:
            self.current = block(text, "current_skill")
        self.rejected = block(text, "rejected_edits")
        known = world.questions.keys()
        if role == "momentum":
            cases = block(text, "regressed") + "\n" + block(text, "persistent_fail")
        else:
            cases = block(text, "cases") or text
        qids = question_ids_in(cases, known)
        if self.task_type is not None:
            qids = [q for q in qids if world.questions[q].task_type == self.task_type]
        self.case_ids = qids
        self.has_strategy_section = any(
            ln.strip().lower() == "## strategy" for ln in self.current.splitlines()
        )


def _cue_text(world: SimWorld, ctx: _Context, keys: tuple[Any, ...]) -> tuple[str, str] | None:
    """(sentence, case id) expressing the cue of a failing case not yet expressed, or None."""
    for qid in shuffled(ctx.case_ids, *keys, "case"):
        q = world.questions[qid]
        if world.expresses_cue(q.task_type, q.cue, [ctx.current]):
            continue
        cue = world.cue(q.task_type, q.cue)
        tt = ctx.task_type or q.task_type
        candidates = [
            _sentence(CUE_FRAMES, ph, tt, *keys, "frame", i)
            for i, ph in enumerate(shuffled(list(cue.phrasings) * 2, *keys, "phr"))
        ]
        text = _fresh(candidates, [ctx.rejected])
        if text is not None:
            return text, qid
    return None


def _harm_text(world: SimWorld, ctx: _Context, keys: tuple[Any, ...]) -> str | None:
    tt = ctx.task_type
    if tt is None:
        tts = [world.questions[q].task_type for q in ctx.case_ids] or list(world.task_types)
        tt = pick(tts, *keys, "harm-task")
    phrasings = [p for h in world.truth.task_types[tt].harmful for p in h.phrasings]
    if not phrasings:
        return None
    candidates = [
        _sentence(HARM_FRAMES, ph, tt, *keys, "frame", i)
        for i, ph in enumerate(shuffled(phrasings * 2, *keys, "phr"))
    ]
    return _fresh(candidates, [ctx.rejected, ctx.current])


def _neutral_text(world: SimWorld, ctx: _Context, keys: tuple[Any, ...]) -> str:
    advice = list(world.truth.neutral_advice) or ["re-read the question once before answering"]
    candidates = [
        _sentence(NEUTRAL_FRAMES, a, ctx.task_type, *keys, "frame", i)
        for i, a in enumerate(shuffled(advice, *keys, "advice"))
    ]
    return _fresh(candidates, [ctx.rejected, ctx.current]) or candidates[0]


def _malformed(keys: tuple[Any, ...], text: str) -> str:
    variants = (
        "I suggest adding a step that checks the evidence more carefully before answering.",
        '{"edits": [{"op": "add", "section": "Strategy", "anchor": null, "text": "- ' + text[2:40],
        json.dumps({"edits": [{"op": "insert", "section": "Strategy", "text": text}]}),
        json.dumps({"changes": [{"add": text}]}),
        json.dumps({"edits": [{"op": "add", "section": "Strategy", "anchor": None, "text": ""}]}),
    )
    return variants[below(len(variants), *keys, "malformed-variant")]


def evolve_reply(
    world: SimWorld, config: SimConfig, role: Role, text: str, sample: int
) -> SimReply:
    """Reply of the evolve_skill / evolve_system / evolve_tool roles (an ``EditProposal`` JSON)."""
    ctx = _Context(world, role, text)
    keys: tuple[Any, ...] = (config.seed, role, digest(normalize_text(text)), sample)
    kind = draw_proposal_kind(config, *keys[1:])
    if unit(config.seed, "malformed-fault", *keys[1:]) < config.fault_malformed_rate:
        kind = "malformed"
    section: str | None = None
    if role == "evolve_skill" and ctx.has_strategy_section:
        section = "Strategy"
    body: str | None = None
    rationale = ""
    label = kind
    if kind == "cue":
        hit = _cue_text(world, ctx, keys)
        if hit is None:
            label = kind = "neutral"
        else:
            body, qid = hit
            rationale = f"Failures such as {qid} skipped this step before answering."
    if kind == "harmful":
        body = _harm_text(world, ctx, keys)
        rationale = "This saves steps on questions like the failed ones."
        if body is None:
            label = kind = "neutral"
    if kind in ("neutral", "malformed") or body is None:
        body = _neutral_text(world, ctx, keys)
        rationale = rationale or "Makes the agent's process more systematic."
        if role == "evolve_skill" and ctx.has_strategy_section and below(2, *keys, "sect") == 1:
            section = "Pitfalls" if "## pitfalls" in ctx.current.lower() else section
    if kind == "malformed":
        return SimReply(_malformed(keys, body), label=f"{role}:malformed")
    edit = {"op": "add", "section": section, "anchor": None, "text": body, "rationale": rationale}
    return SimReply(json.dumps({"edits": [edit]}, ensure_ascii=False), label=f"{role}:{label}")


def diagnose_reply(world: SimWorld, config: SimConfig, text: str, sample: int) -> SimReply:
    """Reply of the diagnose role: one diagnosis per known question id in ``<cases>``."""
    keys: tuple[Any, ...] = (config.seed, "diagnose", digest(normalize_text(text)), sample)
    if unit(*keys, "malformed") < config.fault_malformed_rate:
        return SimReply('{"diagnoses": [{"question_id": ', label="diagnose:malformed")
    cases = block(text, "cases") or text
    out: list[dict[str, Any]] = []
    n_true = 0
    for qid in question_ids_in(cases, world.questions.keys()):
        q = world.questions[qid]
        ev = q.evidence
        u = unit(*keys, "target", qid)
        tool_name: str | None = None
        if u < config.diagnose_system_prob:
            target = "system"
        elif u < config.diagnose_system_prob + config.diagnose_tool_prob:
            target, tool_name = "tool", _TOOL_FOR_EVIDENCE[ev.kind]
        else:
            target = "skill"
        task = world.truth.task_types[q.task_type]
        if unit(*keys, "names-cue", qid) < config.diagnose_cue_prob:
            missing = _statement(pick(world.cue(q.task_type, q.cue).phrasings, *keys, "phr", qid))
            n_true += 1
        else:
            others = [c for c in task.cues if c.cue_id != q.cue]
            if others and below(2, *keys, "other", qid) == 0:
                other = pick(others, *keys, "other-cue", qid)
                missing = _statement(pick(other.phrasings, *keys, "phr", qid))
            else:
                advice = pick(
                    list(world.truth.neutral_advice) or ["check the evidence again"],
                    *keys,
                    "vague",
                    qid,
                )
                missing = _statement(advice)
        where = (
            "the whole video"
            if ev.kind == "summary"
            else f"node {ev.node_id} ({ev.start:g}-{ev.end:g} s)"
        )
        analysis = (
            f"The supporting evidence is in the {_EVIDENCE_WORDS[ev.kind]} of {where}; "
            "the agent answered without relying on it."
        )
        out.append(
            {
                "question_id": qid,
                "target": target,
                "tool_name": tool_name,
                "analysis": analysis,
                "missing_strategy": missing,
            }
        )
    return SimReply(
        json.dumps({"diagnoses": out}, ensure_ascii=False), label=f"diagnose:{len(out)}:{n_true}"
    )


def momentum_reply(world: SimWorld, config: SimConfig, text: str, sample: int) -> SimReply:
    """Reply of the momentum role: ``{"guidance": "- …"}`` (at most five bullets)."""
    ctx = _Context(world, "momentum", text)
    keys: tuple[Any, ...] = (config.seed, "momentum", digest(normalize_text(text)), sample)
    kind = draw_proposal_kind(config, *keys[1:])
    if unit(*keys, "malformed-fault") < config.fault_malformed_rate:
        kind = "malformed"
    if kind == "malformed":
        return SimReply(
            "Guidance: keep the good changes and drop the bad ones.", label="momentum:malformed"
        )
    previous = block(text, "previous_guidance")
    regressions = bool(question_ids_in(block(text, "regressed"), world.questions.keys()))
    kept = [
        ln.strip()
        for ln in previous.splitlines()
        if ln.strip().startswith("- ")
        and not (regressions and ctx.task_type and world.harm_present(ctx.task_type, [ln]))
    ]
    new: str | None = None
    if kind == "cue":
        hit = _cue_text(world, ctx, keys)
        new = hit[0] if hit else None
    elif kind == "harmful":
        new = _harm_text(world, ctx, keys)
    if new is None:
        kind = "neutral"
        new = _neutral_text(world, ctx, keys)
    bullets = [b for b in kept if normalize_text(b) != normalize_text(new)] + [new]
    guidance = "\n".join(bullets[-5:])
    return SimReply(
        json.dumps({"guidance": guidance}, ensure_ascii=False), label=f"momentum:{kind}"
    )


def _statement(phrase: str) -> str:
    return phrase[:1].upper() + phrase[1:].rstrip(".") + "."


def unknown_reply(text: str) -> SimReply:
    """A polite reply for a prompt the simulator does not recognize (no role, no JSON)."""
    del text
    return SimReply(
        "This is a simulated model: it only understands the trm-assets agent conversation and the "
        "prompts/*.md templates.",
        label="unknown",
    )
