"""``trm data synth``: invented videos, trees and Video-MME-format questions, with hidden truth.

Output of :func:`synthesize` (all deterministic from the arguments; byte-for-byte reproducible):

* ``questions.json`` — the official Video-MME per-video JSON (list of videos with nested questions);
* ``trees/{videoID}.json`` — one compact video tree per video (schema in ``data/README.md``);
* ``ground_truth.json`` — the hidden sidecar read only by the simulator (:mod:`.world`);
* ``SOURCE.md`` — what generated the sample, with its seed and exact command.

The evidence for every right option is written into the tree (a clip caption, an OCR string, a
subtitle cue, or the video summary), so an agent that explores the right node can find it.

Why it is long: it generates the committed samples byte for byte (videos, trees, questions, ground
truth); changing its structure would change the samples.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from trm_assets.domain.question import LETTERS, skill_file_name
from trm_assets.llm.sim import catalogue as cat
from trm_assets.llm.sim.draws import below, normal, pick, shuffled, unit, weighted_index
from trm_assets.llm.sim.world import GROUND_TRUTH_KIND, parse_ground_truth
from trm_assets.llm.sim_config import GROUND_TRUTH_FILE

T = TypeVar("T")
GENERATOR_VERSION = 1
DIFFICULTY_MEAN = 1.1
DIFFICULTY_SPREAD = 0.8
SUBTITLE_RATE_SHORT_MEDIUM = 0.74  # long videos always have subtitles (744 of 900 in Video-MME)
_DURATION_RANGE = {"short": (25, 115), "medium": (240, 900), "long": (1800, 3600)}
_STRUCTURE = {"short": (2, 2), "medium": (3, 2), "long": (4, 2)}  # (segments, clips per segment)


@dataclass(frozen=True)
class SynthSummary:
    out_dir: Path
    videos: int
    questions: int
    by_task_type: dict[str, int]
    by_duration: dict[str, int]
    bytes_written: int


def synth_command(videos: int, seed: int, questions_per_video: int, cues_per_task: int) -> str:
    """The command recorded in a sample (``--out`` left open so any directory reproduces it)."""
    cmd = f"trm data synth --out DIR --videos {videos} --seed {seed}"
    if questions_per_video != 3:
        cmd += f" --questions-per-video {questions_per_video}"
    if cues_per_task != 3:
        cmd += f" --cues-per-task {cues_per_task}"
    return cmd


def apportion(total: int, weights: dict[str, int]) -> dict[str, int]:
    """Largest-remainder apportionment of ``total`` items over ``weights`` (ties by name)."""
    wsum = sum(weights.values())
    quotas = {k: total * w / wsum for k, w in weights.items()}
    counts = {k: int(q) for k, q in quotas.items()}
    left = total - sum(counts.values())
    for k in sorted(quotas, key=lambda k: (-(quotas[k] - counts[k]), k))[:left]:
        counts[k] += 1
    return counts


# --- per-video scene model ----------------------------------------------------------------------


@dataclass
class _Clip:
    node_id: str
    segment_id: str
    start: float
    end: float
    actor: str
    action: tuple[str, str, str]
    obj: str
    colour: str
    place: str
    extra: list[str] = field(default_factory=list)
    ocr: list[str] = field(default_factory=list)
    subtitles: list[str] = field(default_factory=list)

    @property
    def base_caption(self) -> str:
        return _cap(f"{self.actor} {self.action[0]} the {self.colour} {self.obj} {self.place}.")


@dataclass
class _Video:
    index: int
    video_id: str
    videoID: str
    duration: str
    duration_sec: float
    domain: str
    sub_category: str
    has_subtitles: bool
    topic: str
    clips: list[_Clip]
    segments: list[tuple[str, float, float, str]]  # (id, start, end, place)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _make_video_id(seed: int, index: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    # A YouTube-like 11-character id; it starts with a letter so no file name starts with "-".
    first = alphabet[below(52, seed, "videoID", index, 0)]
    return first + "".join(alphabet[below(64, seed, "videoID", index, i)] for i in range(1, 11))


def _build_video(seed: int, index: int, video_id: str, duration: str) -> _Video:
    k = (seed, "video", index)
    subs = [(d, s) for d, ss in cat.DOMAINS.items() for s in ss]
    domain, sub_category = pick(subs, *k, "sub")
    lo, hi = _DURATION_RANGE[duration]
    duration_sec = float(lo + below(hi - lo + 1, *k, "dur"))
    has_subtitles = duration == "long" or unit(*k, "subs") < SUBTITLE_RATE_SHORT_MEDIUM
    n_seg, per_seg = _STRUCTURE[duration]
    n_clips = n_seg * per_seg
    bounds = [round(duration_sec * i / n_clips, 1) for i in range(n_clips + 1)]
    bounds[-1] = duration_sec
    cast = shuffled(cat.PEOPLE, *k, "cast")[:3]
    places = shuffled(cat.PLACES, *k, "places")[:n_seg]
    objects = shuffled(cat.OBJECTS, *k, "objects")
    actions = shuffled(cat.ACTIONS, *k, "actions")
    clips: list[_Clip] = []
    segments: list[tuple[str, float, float, str]] = []
    for s in range(n_seg):
        sid = f"s{s}"
        segments.append((sid, bounds[s * per_seg], bounds[(s + 1) * per_seg], places[s]))
        for c in range(per_seg):
            i = s * per_seg + c
            clips.append(
                _Clip(
                    node_id=f"{sid}c{c}",
                    segment_id=sid,
                    start=bounds[i],
                    end=bounds[i + 1],
                    actor=pick(cast, *k, "actor", i),
                    action=actions[i % len(actions)],
                    obj=objects[i % len(objects)],
                    colour=pick(cat.COLOURS, *k, "colour", i),
                    place=places[s],
                )
            )
    return _Video(
        index=index,
        video_id=video_id,
        videoID=_make_video_id(seed, index),
        duration=duration,
        duration_sec=duration_sec,
        domain=domain,
        sub_category=sub_category,
        has_subtitles=has_subtitles,
        topic=pick(cat.TOPICS, *k, "topic"),
        clips=clips,
        segments=segments,
    )


# --- question builders ---------------------------------------------------------------------------

# A builder returns (question text, right option, three distractors, evidence kind, evidence text)
# and writes the evidence into the video (caption sentence, OCR string or subtitle line).
_Built = tuple[str, str, list[str], str, str]
_Builder = Callable[[_Video, _Clip, tuple[Any, ...]], _Built]


def _others(pool: Sequence[T], right: T, n: int, *keys: object) -> list[T]:
    return [x for x in shuffled(list(pool), *keys) if x != right][:n]


def _place_evidence(
    video: _Video, clip: _Clip, sentence: str, subtitle_line: str, keys: tuple[Any, ...]
) -> tuple[str, str]:
    """Put evidence in a subtitle (when the video has them, half the time) or in the caption."""
    if video.has_subtitles and unit(*keys, "evidence-kind") < 0.5:
        clip.subtitles.append(subtitle_line)
        return "subtitle", subtitle_line
    clip.extra.append(sentence)
    return "caption", sentence


def _temporal_perception(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    thirds = (
        "In the first third of the video.",
        "In the middle third of the video.",
        "In the last third of the video.",
    )
    pos = min(2, int(3 * ((clip.start + clip.end) / 2) / video.duration_sec))
    right = thirds[pos]
    wrong = [t for t in thirds if t != right] + ["It does not happen in the video."]
    q = f"When does {clip.actor} {clip.action[2]} the {clip.colour} {clip.obj}?"
    return q, right, wrong, "caption", clip.base_caption


def _spatial_perception(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    other = _others(cat.OBJECTS, clip.obj, 1, *keys, "obj2")[0]
    side = pick(cat.SIDES, *keys, "side")
    sentence = _cap(f"the {other} stands {side} {clip.actor}.")
    clip.extra.append(sentence)
    q = f"Where is the {other} while {clip.actor} {clip.action[0]} the {clip.obj}?"
    right = _cap(f"{side} {clip.actor}.")
    wrong = [_cap(f"{s} {clip.actor}.") for s in cat.SIDES if s != side]
    return q, right, wrong, "caption", sentence


def _attribute_perception(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    q = f"What colour is the {clip.obj} that {clip.actor} {clip.action[0]} {clip.place}?"
    right = _cap(f"{clip.colour}.")
    wrong = [_cap(f"{c}.") for c in _others(cat.COLOURS, clip.colour, 3, *keys, "colours")]
    return q, right, wrong, "caption", clip.base_caption


def _action_recognition(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    q = f"What does {clip.actor} do with the {clip.colour} {clip.obj} {clip.place}?"
    right = _cap(f"{clip.action[1]} the {clip.obj}.")
    wrong = [
        _cap(f"{a[1]} the {clip.obj}.")
        for a in _others(cat.ACTIONS, clip.action, 3, *keys, "actions")
    ]
    return q, right, wrong, "caption", clip.base_caption


def _object_recognition(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    q = f"Which object does {clip.actor} {clip.action[2]} {clip.place}?"
    right = _cap(f"the {clip.obj}.")
    wrong = [_cap(f"the {o}.") for o in _others(cat.OBJECTS, clip.obj, 3, *keys, "objects")]
    return q, right, wrong, "caption", clip.base_caption


def _code(*keys: object) -> str:
    word = pick(cat.SYLLABLES, *keys, "a") + pick(cat.SYLLABLES, *keys, "b")
    return f"{word} {10 + below(90, *keys, 'n')}"


def _ocr_problem(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    right = _code(*keys, "right")
    wrong: list[str] = []
    i = 0
    while len(wrong) < 3:
        c = _code(*keys, "wrong", i)
        if c != right and c not in wrong:
            wrong.append(c)
        i += 1
    sign = pick(cat.SIGNS, *keys, "sign")
    clip.ocr.append(right)
    q = f"What is written on the {sign} shown while {clip.actor} {clip.action[0]} the {clip.obj}?"
    return q, f"{right}.", [f"{w}." for w in wrong], "ocr", right


def _counting(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    n = 2 + below(6, *keys, "n")
    noun = pick(cat.COUNTABLES, *keys, "noun")
    kind, text = _place_evidence(
        video,
        clip,
        f"There are {n} {noun} on the table.",
        f"We set out {n} {noun} on the table.",
        keys,
    )
    q = f"How many {noun} are on the table while {clip.actor} {clip.action[0]} the {clip.obj}?"
    wrong = [f"{m}." for m in _others([str(x) for x in range(1, 10)], str(n), 3, *keys, "counts")]
    return q, f"{n}.", wrong, kind, text


def _temporal_reasoning(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    # ``clip`` is the evidence clip; the question refers to the event of the clip before it.
    prev = video.clips[video.clips.index(clip) - 1]
    q = f"What happens right after {prev.actor} {prev.action[0]} the {prev.obj}?"
    right = _cap(f"{clip.actor} {clip.action[0]} the {clip.obj}.")
    pool = [_cap(f"{c.actor} {c.action[0]} the {c.obj}.") for c in video.clips if c is not clip]
    pool += [_cap(f"{clip.actor} {a[0]} the {clip.obj}.") for a in cat.ACTIONS if a != clip.action]
    wrong = _others(sorted(set(pool)), right, 3, *keys, "events")
    return q, right, wrong, "caption", clip.base_caption


def _spatial_reasoning(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    target, passed = _others(cat.OBJECTS, clip.obj, 2, *keys, "landmarks")
    sentence = _cap(f"{clip.actor} walks towards the {target}, passing the {passed} on the way.")
    clip.extra.append(sentence)
    q = f"Where is {clip.actor} heading while {clip.action[1]} the {clip.obj}?"
    wrong = [
        f"Towards the {passed}.",
        *[
            f"Towards the {o}."
            for o in _others(cat.OBJECTS, target, 4, *keys, "more")
            if o not in (passed, clip.obj)
        ][:2],
    ]
    return q, f"Towards the {target}.", wrong, "caption", sentence


def _action_reasoning(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    reason = pick(cat.REASONS, *keys, "reason")
    kind, text = _place_evidence(
        video,
        clip,
        _cap(f"{clip.actor} does this {reason}."),
        f"I {clip.action[2]} the {clip.obj} {reason}.",
        keys,
    )
    q = f"Why does {clip.actor} {clip.action[2]} the {clip.obj}?"
    wrong = [_cap(f"{r}.") for r in _others(cat.REASONS, reason, 3, *keys, "reasons")]
    return q, _cap(f"{reason}."), wrong, kind, text


def _object_reasoning(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    purpose = pick(cat.PURPOSES, *keys, "purpose")
    sentence = f"Later the {clip.obj} is used for {purpose}."
    clip.extra.append(sentence)
    q = f"What is the {clip.obj} most likely used for in the video?"
    wrong = [_cap(f"{p}.") for p in _others(cat.PURPOSES, purpose, 3, *keys, "purposes")]
    return q, _cap(f"{purpose}."), wrong, "caption", sentence


def _information_synopsis(video: _Video, clip: _Clip, keys: tuple[Any, ...]) -> _Built:
    q = "Which option best summarises the video?"
    wrong = [_cap(f"{t}.") for t in _others(cat.TOPICS, video.topic, 3, *keys, "topics")]
    return q, _cap(f"{video.topic}."), wrong, "summary", video.topic


_BUILDERS: dict[str, _Builder] = {
    "Temporal Perception": _temporal_perception,
    "Spatial Perception": _spatial_perception,
    "Attribute Perception": _attribute_perception,
    "Action Recognition": _action_recognition,
    "Object Recognition": _object_recognition,
    "OCR Problems": _ocr_problem,
    "Counting Problem": _counting,
    "Temporal Reasoning": _temporal_reasoning,
    "Spatial Reasoning": _spatial_reasoning,
    "Action Reasoning": _action_reasoning,
    "Object Reasoning": _object_reasoning,
    "Information Synopsis": _information_synopsis,
}


# --- assembly ------------------------------------------------------------------------------------


def _tree_json(video: _Video, seed: int) -> dict[str, Any]:
    nodes: dict[str, Any] = {
        "v": {
            "level": "video",
            "parent": None,
            "children": [s[0] for s in video.segments],
            "start": 0.0,
            "end": video.duration_sec,
            "caption": f"{video.sub_category} video: {video.topic}.",
        }
    }
    subtitles: list[dict[str, Any]] = []
    for sid, s0, s1, place in video.segments:
        seg_clips = [c for c in video.clips if c.segment_id == sid]
        people = sorted({c.actor for c in seg_clips})
        objs = " and ".join(f"the {c.obj}" for c in seg_clips)
        nodes[sid] = {
            "level": "segment",
            "parent": "v",
            "children": [c.node_id for c in seg_clips],
            "start": s0,
            "end": s1,
            "caption": _cap(f"{' and '.join(people)} {place}, with {objs}."),
        }
        for c in seg_clips:
            node: dict[str, Any] = {
                "level": "clip",
                "parent": sid,
                "start": c.start,
                "end": c.end,
                "caption": " ".join([c.base_caption, *c.extra]),
            }
            if c.subtitles:
                node["subtitle_text"] = " ".join(c.subtitles)
                span = max(0.1, round((c.end - c.start) / (len(c.subtitles) + 1), 1))
                for j, line in enumerate(c.subtitles):
                    t0 = round(c.start + j * span, 1)
                    subtitles.append(
                        {"start": t0, "end": round(min(c.end, t0 + span), 1), "text": line}
                    )
            if c.ocr:
                node["ocr"] = list(c.ocr)
            nodes[c.node_id] = node
    return {
        "schema_version": "1.0",
        "video": {
            "video_id": video.video_id,
            "videoID": video.videoID,
            "url": _url(video.videoID),
            "duration_sec": video.duration_sec,
            "duration_category": video.duration,
            "domain": video.domain,
            "sub_category": video.sub_category,
            "has_subtitles": video.has_subtitles,
        },
        "levels": ["video", "segment", "clip"],
        "root_id": "v",
        "nodes": nodes,
        "subtitles": subtitles,
        "provenance": {"captioner": "simulated", "generator": "trm data synth", "seed": seed},
    }


def _url(video_id: str) -> str:
    return f"https://video.invalid/sim/{video_id}"


def _pick_clips(video: _Video, task_types: list[str], keys: tuple[Any, ...]) -> list[_Clip]:
    """One distinct evidence clip per question (temporal reasoning needs a predecessor clip)."""
    order = shuffled(video.clips, *keys, "clips")
    used: set[str] = set()
    chosen: list[_Clip] = []
    for tt in task_types:
        ok = [
            c
            for c in order
            if c.node_id not in used and (tt != "Temporal Reasoning" or c is not video.clips[0])
        ]
        c = ok[0] if ok else order[0] if tt != "Temporal Reasoning" else video.clips[1]
        used.add(c.node_id)
        chosen.append(c)
    return chosen


def build_sample(
    *, videos: int, seed: int, questions_per_video: int = 3, cues_per_task: int = 3
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any]]:
    """(questions JSON, trees by videoID, ground truth JSON) of one sample, all in memory."""
    if videos < 1 or questions_per_video < 1:
        raise ValueError("synth needs --videos >= 1 and --questions-per-video >= 1")
    if not 1 <= cues_per_task <= len(cat.CUE_WEIGHTS):
        raise ValueError(f"--cues-per-task must be between 1 and {len(cat.CUE_WEIGHTS)}")
    total = videos * questions_per_video
    counts = apportion(total, cat.TASK_TYPE_WEIGHTS)
    task_list = shuffled([tt for tt in cat.TASK_TYPES for _ in range(counts[tt])], seed, "tasks")
    durations = ("short", "medium", "long")
    duration_of = {
        v: durations[i % 3] for i, v in enumerate(shuffled(list(range(videos)), seed, "durations"))
    }
    width = max(3, len(str(videos)))
    cue_weights = cat.CUE_WEIGHTS[:cues_per_task]

    questions_json: list[dict[str, Any]] = []
    trees: dict[str, dict[str, Any]] = {}
    gt_questions: dict[str, dict[str, Any]] = {}
    for v in range(videos):
        video_id = f"{v + 1:0{width}d}"
        video = _build_video(seed, v, video_id, duration_of[v])
        tts = task_list[v * questions_per_video : (v + 1) * questions_per_video]
        clips = _pick_clips(video, tts, (seed, "video", v))
        qs: list[dict[str, Any]] = []
        for k, (tt, clip) in enumerate(zip(tts, clips, strict=True)):
            qid = f"{video_id}-{k + 1}"
            keys = (seed, "q", qid)
            text, right, wrong, kind, ev_text = _BUILDERS[tt](video, clip, keys)
            pos = below(4, *keys, "answer")
            opts = [*wrong[:pos], right, *wrong[pos:3]]
            letter = LETTERS[pos]
            qs.append(
                {
                    "question_id": qid,
                    "task_type": tt,
                    "question": text,
                    "options": [f"{LETTERS[i]}. {o}" for i, o in enumerate(opts)],
                    "answer": letter,
                }
            )
            cue_index = weighted_index(cue_weights, *keys, "cue")
            difficulty = (
                DIFFICULTY_MEAN
                + cat.TASK_DIFFICULTY[tt]
                + cat.DURATION_DIFFICULTY[video.duration]
                + DIFFICULTY_SPREAD * normal(*keys, "difficulty")
            )
            if kind == "summary":
                node_id, seg_id, t0, t1 = "v", None, 0.0, video.duration_sec
            else:
                node_id, seg_id, t0, t1 = clip.node_id, clip.segment_id, clip.start, clip.end
            gt_questions[qid] = {
                "task_type": tt,
                "videoID": video.videoID,
                "answer": letter,
                "cue": cat.CATALOGUE[tt][0][cue_index][0],
                "difficulty": round(difficulty, 3),
                "evidence": {
                    "kind": kind,
                    "node_id": node_id,
                    "segment_id": seg_id,
                    "start": t0,
                    "end": t1,
                    "text": ev_text,
                },
            }
        if video.has_subtitles:
            for i, c in enumerate(video.clips):
                if not c.subtitles:
                    c.subtitles.append(pick(cat.FILLER_SUBTITLES, seed, "filler", v, i))
        trees[video.videoID] = _tree_json(video, seed)
        questions_json.append(
            {
                "video_id": video_id,
                "duration": video.duration,
                "domain": video.domain,
                "sub_category": video.sub_category,
                "url": _url(video.videoID),
                "videoID": video.videoID,
                "questions": qs,
            }
        )

    ground_truth = {
        "kind": GROUND_TRUTH_KIND,
        "format_version": 1,
        "simulated": True,
        "generator": {
            "seed": seed,
            "videos": videos,
            "questions_per_video": questions_per_video,
            "cues_per_task": cues_per_task,
            "generator_version": GENERATOR_VERSION,
            "command": synth_command(videos, seed, questions_per_video, cues_per_task),
        },
        "task_types": {
            tt: {
                "skill_file": skill_file_name(tt),
                "cues": [
                    {
                        "cue_id": cid,
                        "summary": summ,
                        "phrasings": list(ph),
                        "weight": round(w / sum(cue_weights), 4),
                    }
                    for (cid, summ, ph), w in zip(
                        cat.CATALOGUE[tt][0][:cues_per_task], cue_weights, strict=True
                    )
                ],
                "harmful": [
                    {"harm_id": hid, "phrasings": list(ph)} for hid, ph in cat.CATALOGUE[tt][1]
                ],
            }
            for tt in sorted(cat.TASK_TYPES)
        },
        "neutral_advice": list(cat.NEUTRAL_ADVICE),
        "questions": gt_questions,
    }
    return questions_json, trees, ground_truth


def _source_md(gt: dict[str, Any], n_questions: int) -> str:
    g = gt["generator"]
    return (
        "# SIMULATED sample: source\n\n"
        "Every video, tree and question in this directory is invented by the simulated world's\n"
        "generator (no Video-MME content; Video-MME's licence forbids redistributing it).\n\n"
        f"* seed: {g['seed']}\n"
        f"* videos: {g['videos']}, questions: {n_questions}\n"
        f"* questions per video: {g['questions_per_video']}, "
        f"cues per task type: {g['cues_per_task']}\n"
        f"* generator version: {g['generator_version']}\n\n"
        "Regenerate byte for byte (replace DIR with this directory):\n\n"
        f"    {g['command']}\n\n"
        "`ground_truth.json` is the simulator's hidden sidecar (cues, harmful directives,\n"
        "difficulties, evidence locations). Never show it to an agent or an evolve model.\n"
    )


def _dump(obj: Any, *, compact: bool) -> str:
    """Compact JSON, or one record per line (lists, ``questions``): small and diffable."""
    if compact:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"

    def one(x: Any) -> str:
        return json.dumps(x, ensure_ascii=False, separators=(", ", ": "))

    if isinstance(obj, list):
        return "[\n" + ",\n".join(one(x) for x in obj) + "\n]\n"
    lines = []
    for key, value in obj.items():
        if isinstance(value, dict) and key in ("questions", "task_types"):
            inner = ",\n".join(f"  {one(k)}: {one(v)}" for k, v in value.items())
            lines.append(f" {one(key)}: {{\n{inner}\n }}")
        else:
            lines.append(f" {one(key)}: {one(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def synthesize(
    out_dir: str | Path,
    *,
    videos: int,
    seed: int,
    questions_per_video: int = 3,
    cues_per_task: int = 3,
) -> SynthSummary:
    """Write a sample to ``out_dir`` (its ``trees/`` is replaced; other files are overwritten)."""
    out = Path(out_dir)
    questions_json, trees, gt = build_sample(
        videos=videos,
        seed=seed,
        questions_per_video=questions_per_video,
        cues_per_task=cues_per_task,
    )
    parse_ground_truth(gt, "<generated ground truth>")  # the generator must produce a valid sidecar
    out.mkdir(parents=True, exist_ok=True)
    tree_dir = out / "trees"
    if tree_dir.exists():
        shutil.rmtree(tree_dir)
    tree_dir.mkdir()
    written = 0
    for video_id, tree in sorted(trees.items()):
        written += _write(tree_dir / f"{video_id}.json", _dump(tree, compact=True))
    n_q = sum(len(v["questions"]) for v in questions_json)
    written += _write(out / "questions.json", _dump(questions_json, compact=False))
    written += _write(out / GROUND_TRUTH_FILE, _dump(gt, compact=False))
    written += _write(out / "SOURCE.md", _source_md(gt, n_q))
    by_task = Counter(q["task_type"] for v in questions_json for q in v["questions"])
    by_dur = Counter(v["duration"] for v in questions_json for _ in v["questions"])
    return SynthSummary(
        out_dir=out,
        videos=videos,
        questions=n_q,
        by_task_type=dict(sorted(by_task.items())),
        by_duration=dict(sorted(by_dur.items())),
        bytes_written=written,
    )


def _write(path: Path, text: str) -> int:
    data = text.encode("utf-8")
    path.write_bytes(data)
    return len(data)
