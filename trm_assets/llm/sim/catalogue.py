"""The simulator's invented vocabulary: hidden strategy cues, harmful directives, neutral advice,
and the words the generator builds videos and questions from.

All text here is invented for this project (Video-MME's licence forbids copying its content); only
the 12 task-type strings, the domains and the sub-categories are Video-MME's own enumerations
(VIDEOMME-NOTES §1.2). The generator copies the cue/harm/neutral catalogue into
``ground_truth.json`` so a committed sample stays self-describing if this file changes later.

A cue is *expressed* by a text when the normalized text contains one of its phrasings as whole
words (:func:`trm_assets.llm.sim.draws.normalize_text`). Phrasings are specific enough that
generic advice does not hit them by accident (checked by the tests).

Why it is long: it is data: the simulated world's task types, cues, harmful directives and
phrasings.
"""

from __future__ import annotations

# (task_type, [(cue_id, summary, phrasings)], [(harm_id, phrasings)])
CueSpec = tuple[str, str, tuple[str, ...]]
HarmSpec = tuple[str, tuple[str, ...]]

TASK_TYPES: tuple[str, ...] = (
    "Temporal Perception",
    "Spatial Perception",
    "Attribute Perception",
    "Action Recognition",
    "Object Recognition",
    "OCR Problems",
    "Counting Problem",
    "Temporal Reasoning",
    "Spatial Reasoning",
    "Action Reasoning",
    "Object Reasoning",
    "Information Synopsis",
)

# Approximate Video-MME question counts per task type (VIDEOMME-NOTES §1.2, read off sta.jpg).
TASK_TYPE_WEIGHTS: dict[str, int] = {
    "Temporal Perception": 55,
    "Spatial Perception": 54,
    "Attribute Perception": 222,
    "Action Recognition": 313,
    "Object Recognition": 354,
    "OCR Problems": 139,
    "Counting Problem": 268,
    "Temporal Reasoning": 177,
    "Spatial Reasoning": 56,
    "Action Reasoning": 285,
    "Object Reasoning": 455,
    "Information Synopsis": 323,
}

# Log-odds offsets of difficulty: counting and temporal reasoning hardest, OCR and synopsis easiest
# (the shape of the per-task radar chart, VIDEOMME-NOTES §2.2).
TASK_DIFFICULTY: dict[str, float] = {
    "Temporal Perception": 0.2,
    "Spatial Perception": 0.0,
    "Attribute Perception": -0.1,
    "Action Recognition": -0.1,
    "Object Recognition": -0.2,
    "OCR Problems": -0.5,
    "Counting Problem": 0.6,
    "Temporal Reasoning": 0.5,
    "Spatial Reasoning": 0.3,
    "Action Reasoning": 0.1,
    "Object Reasoning": 0.1,
    "Information Synopsis": -0.5,
}
DURATION_DIFFICULTY: dict[str, float] = {"short": -0.3, "medium": 0.0, "long": 0.3}

# Relative frequency of a task type's cues among its questions (first cue most common).
CUE_WEIGHTS: tuple[float, ...] = (0.5, 0.3, 0.2)

CATALOGUE: dict[str, tuple[tuple[CueSpec, ...], tuple[HarmSpec, ...]]] = {
    "Temporal Perception": (
        (
            (
                "tp-timestamps",
                "Write down the start and end time of every relevant clip before placing an event.",
                (
                    "note the start and end time of every relevant clip",
                    "write down the timestamps of each relevant clip",
                ),
            ),
            (
                "tp-relative-position",
                "Relate the event's time to the total video duration.",
                (
                    "compare the event time with the total video duration",
                    "relate the event time to the video duration",
                ),
            ),
            (
                "tp-first-occurrence",
                "Locate the first occurrence of the event, not a later repeat.",
                (
                    "locate the first occurrence of the event",
                    "find the first occurrence of the event",
                ),
            ),
        ),
        (
            ("tp-assume-start", ("assume the event happens at the beginning of the video",)),
            ("tp-overview-only", ("use only the overview to place events in time",)),
        ),
    ),
    "Spatial Perception": (
        (
            (
                "sp-inspect-positions",
                "Confirm left/right/behind relations by inspecting frames.",
                (
                    "inspect frames to confirm relative positions",
                    "confirm relative positions with inspect_frames",
                ),
            ),
            (
                "sp-camera-view",
                "Describe positions from the camera's point of view.",
                (
                    "use the camera's point of view for left and right",
                    "describe positions from the camera's point of view",
                ),
            ),
            (
                "sp-reference-first",
                "Find the reference object first, then judge the position relative to it.",
                (
                    "locate the reference object before judging position",
                    "find the reference object first",
                ),
            ),
        ),
        (
            ("sp-interchangeable", ("treat left and right as interchangeable",)),
            ("sp-ignore-reference", ("ignore the reference object in the question",)),
        ),
    ),
    "Attribute Perception": (
        (
            (
                "ap-verify-frames",
                "Verify colours and sizes by inspecting frames of the exact clip.",
                (
                    "verify the attribute by inspecting frames",
                    "inspect frames to verify colours and sizes",
                ),
            ),
            (
                "ap-same-object",
                "Check that the attribute belongs to the very object the question names.",
                (
                    "check that the attribute belongs to the named object",
                    "make sure the attribute belongs to the same object",
                ),
            ),
            (
                "ap-lighting",
                "Account for lighting and shadows when judging a colour.",
                (
                    "account for lighting when judging colour",
                    "account for lighting when judging color",
                ),
            ),
        ),
        (
            ("ap-common-colour", ("pick the most common colour among the options",)),
            ("ap-summary-attributes", ("rely on the video summary for attributes",)),
        ),
    ),
    "Action Recognition": (
        (
            (
                "ar-clip-level",
                "Expand to clip-level captions around the moment before naming an action.",
                (
                    "expand to clip level before naming an action",
                    "read clip-level captions around the moment in question",
                ),
            ),
            (
                "ar-actor-first",
                "Confirm who performs the action before naming it.",
                (
                    "confirm the actor before naming the action",
                    "identify who performs the action before naming it",
                ),
            ),
            (
                "ar-verb-match",
                "Match the option's verb to the caption's verb exactly.",
                (
                    "match the option verb to the caption verb",
                    "compare the verb of each option with the caption verb",
                ),
            ),
        ),
        (
            ("ar-generic-action", ("choose the most generic action among the options",)),
            ("ar-segment-only", ("stop at segment summaries when naming actions",)),
        ),
    ),
    "Object Recognition": (
        (
            (
                "or-search-each-option",
                "Search the captions for each option's object name.",
                (
                    "search captions for each option's object",
                    "search for every option's object name",
                ),
            ),
            (
                "or-held-object",
                "Look at what is held or handled in the clip.",
                ("check what the person is holding", "look at what is held or handled in the clip"),
            ),
            (
                "or-ocr-labels",
                "Use OCR labels and brand names to identify objects.",
                ("check ocr for labels on objects", "use labels in the ocr to identify objects"),
            ),
        ),
        (
            ("or-first-mentioned", ("choose the first object mentioned in the overview",)),
            ("or-skip-brief", ("skip objects that appear only briefly",)),
        ),
    ),
    "OCR Problems": (
        (
            (
                "ocr-exact-match",
                "Compare the option text with the OCR string character by character.",
                (
                    "compare option text with the ocr string character by character",
                    "copy the on-screen text character by character",
                ),
            ),
            (
                "ocr-clip-range",
                "Call get_ocr on the exact time range of the clip that shows the text.",
                (
                    "call get_ocr on the exact time range of the clip",
                    "query ocr for the exact clip time range",
                ),
            ),
            (
                "ocr-not-subtitles",
                "Keep subtitles separate from on-screen text.",
                (
                    "keep subtitles separate from on-screen text",
                    "do not confuse subtitles with on-screen text",
                ),
            ),
        ),
        (
            ("ocr-guess-topic", ("guess the text from the topic of the video",)),
            ("ocr-real-words", ("prefer options that look like real words",)),
        ),
    ),
    "Counting Problem": (
        (
            (
                "cp-distinct",
                "Count each distinct instance only once (deduplicate repeats across clips).",
                (
                    "count each distinct instance only once",
                    "deduplicate repeated appearances before counting",
                ),
            ),
            (
                "cp-all-clips",
                "Check every clip before giving a count.",
                ("check every clip before giving a count", "scan all clips before counting"),
            ),
            (
                "cp-spoken-total",
                "Look for a total stated in the subtitles.",
                (
                    "look for spoken totals in the subtitles",
                    "check the subtitles for a stated number",
                ),
            ),
        ),
        (
            ("cp-overview-estimate", ("estimate the count from the overview alone",)),
            ("cp-largest", ("pick the largest number offered",)),
        ),
    ),
    "Temporal Reasoning": (
        (
            (
                "tr-timeline",
                "Build a timeline of the events before answering.",
                (
                    "build a timeline of the events",
                    "list the events in time order before answering",
                ),
            ),
            (
                "tr-neighbours",
                "Read the clips immediately before and after the event.",
                (
                    "read the neighbouring clips of the event",
                    "check the clip immediately before and after the event",
                ),
            ),
            (
                "tr-next-vs-later",
                "Distinguish what happens next from what happens later.",
                (
                    "distinguish what happens next from what happens later",
                    "separate the next event from later events",
                ),
            ),
        ),
        (
            ("tr-narration-order", ("assume events are described in the order they happen",)),
            ("tr-first-match", ("answer from the first matching caption without checking order",)),
        ),
    ),
    "Spatial Reasoning": (
        (
            (
                "sr-layout",
                "Combine positions from several clips into one layout of the scene.",
                (
                    "combine positions from several clips into one layout",
                    "sketch the layout of the scene from several clips",
                ),
            ),
            (
                "sr-movement",
                "Track the direction of movement across clips.",
                (
                    "track the direction of movement across clips",
                    "follow the direction of movement between clips",
                ),
            ),
            (
                "sr-known-size",
                "Compare distances using objects of known size.",
                (
                    "compare distances using objects of known size",
                    "use objects of known size to judge distance",
                ),
            ),
        ),
        (
            ("sr-static-camera", ("assume the camera never moves",)),
            ("sr-caption-distance", ("judge distance from the caption wording alone",)),
        ),
    ),
    "Action Reasoning": (
        (
            (
                "arr-stated-goal",
                "Search the subtitles for the reason people give for their actions.",
                (
                    "search subtitles for why the person acts",
                    "look for the stated goal in the subtitles",
                ),
            ),
            (
                "arr-consequence",
                "Read the outcome of the action in the following clip.",
                (
                    "read the outcome in the next clip",
                    "check what the action leads to in the following clip",
                ),
            ),
            (
                "arr-situation",
                "Read the segment summary for the surrounding situation.",
                (
                    "read the segment summary for the surrounding situation",
                    "use the segment summary to understand the situation",
                ),
            ),
        ),
        (
            ("arr-common-sense", ("infer motives from common sense instead of evidence",)),
            ("arr-ignore-speech", ("ignore what people say about their actions",)),
        ),
    ),
    "Object Reasoning": (
        (
            (
                "orr-observed-use",
                "Infer an object's purpose from how it is used on screen.",
                (
                    "infer an object's purpose from how it is used on screen",
                    "observe how the object is used",
                ),
            ),
            (
                "orr-track-object",
                "Track the object across clips to see what happens to it.",
                ("track the object across clips", "follow the object through later clips"),
            ),
            (
                "orr-owner",
                "Check who owns or brings the object.",
                ("check who owns or brings the object", "find out who brought the object"),
            ),
        ),
        (
            ("orr-general-knowledge", ("answer from general knowledge about the object",)),
            ("orr-unnamed", ("ignore objects that are not named in the question",)),
        ),
    ),
    "Information Synopsis": (
        (
            (
                "is-all-segments",
                "Read every segment summary before choosing a synopsis.",
                (
                    "read every segment summary before summarising",
                    "cover all segments before choosing a summary",
                ),
            ),
            (
                "is-subtitle-topic",
                "Skim the subtitles to confirm the main topic.",
                (
                    "skim the subtitles for the main topic",
                    "use subtitles to confirm the main topic",
                ),
            ),
            (
                "is-whole-video",
                "Reject options that describe only one scene.",
                (
                    "reject options that describe only one scene",
                    "prefer options that cover the whole video",
                ),
            ),
        ),
        (
            ("is-first-segment", ("summarise from the first segment only",)),
            ("is-most-detailed", ("choose the most detailed option",)),
        ),
    ),
}

# Plausible advice that changes nothing (the "neutral" proposals). Must express no cue/harm.
NEUTRAL_ADVICE: tuple[str, ...] = (
    "keep the final answer to a single letter",
    "mention the node ids you relied on in your reasoning",
    "prefer short tool queries of two to four words",
    "re-read the question once before the final answer",
    "avoid repeating a tool call with identical arguments",
    "keep a short list of the tools you have already used",
    "stay well within the step budget",
    "summarise what you learned after each tool call",
    "use the same terms as the question when searching",
    "state your confidence briefly before answering",
    "write down which option each piece of evidence supports",
    "be careful with questions that contain negations",
)

# Sentence frames for proposals: "{p}" is a phrasing, "{task}" the task type in lower case.
CUE_FRAMES: tuple[str, ...] = (
    "- {P}.",
    "- Always {p}.",
    "- Before answering, {p}.",
    "- For {task} questions, {p}.",
    "- Make it a habit to {p}.",
)
HARM_FRAMES: tuple[str, ...] = (
    "- To save steps, {p}.",
    "- {P}.",
    "- When unsure, {p}.",
    "- For {task} questions, {p}.",
)
NEUTRAL_FRAMES: tuple[str, ...] = (
    "- {P}.",
    "- It helps to {p}.",
    "- For {task} questions, {p}.",
    "- Remember to {p}.",
)

DOMAINS: dict[str, tuple[str, ...]] = {
    "Knowledge": (
        "Humanity & History",
        "Literature & Art",
        "Biology & Medicine",
        "Finance & Commerce",
        "Astronomy",
        "Geography",
        "Law",
        "Life Tip",
        "Technology",
    ),
    "Film & Television": ("Animation", "Movie & TV Show", "Documentary", "News Report"),
    "Sports Competition": ("Esports", "Basketball", "Football", "Athletics", "Other Sports"),
    "Artistic Performance": ("Stage Play", "Magic Show", "Variety Show", "Acrobatics"),
    "Life Record": (
        "Handicraft",
        "Food",
        "Fashion",
        "Daily Life",
        "Travel",
        "Pet & Animal",
        "Exercise",
    ),
    "Multilingual": ("Multilingual",),
}

# --- words for invented videos ---------------------------------------------------------------

PEOPLE: tuple[str, ...] = (
    "the host",
    "the presenter",
    "a woman in a green coat",
    "a man with a grey beard",
    "the chef",
    "the guide",
    "a young player",
    "the narrator",
    "a girl with a red cap",
    "the referee",
    "an old craftsman",
    "the magician",
    "a cyclist",
    "the teacher",
    "a street vendor",
    "the dancer",
)
ACTIONS: tuple[tuple[str, str, str], ...] = (
    # (third person, -ing form, base form)
    ("picks up", "picking up", "pick up"),
    ("puts down", "putting down", "put down"),
    ("opens", "opening", "open"),
    ("points at", "pointing at", "point at"),
    ("carries", "carrying", "carry"),
    ("paints", "painting", "paint"),
    ("inspects", "inspecting", "inspect"),
    ("throws", "throwing", "throw"),
    ("wraps", "wrapping", "wrap"),
    ("cleans", "cleaning", "clean"),
    ("lifts", "lifting", "lift"),
    ("measures", "measuring", "measure"),
    ("hands over", "handing over", "hand over"),
    ("shakes", "shaking", "shake"),
)
OBJECTS: tuple[str, ...] = (
    "kettle",
    "wooden box",
    "umbrella",
    "paper map",
    "lamp",
    "glass jar",
    "kite",
    "leather bag",
    "trophy",
    "clay pot",
    "scarf",
    "camera",
    "bottle",
    "violin case",
    "flag",
    "whistle",
    "notebook",
    "basket",
    "helmet",
    "telescope",
)
COLOURS: tuple[str, ...] = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple")
PLACES: tuple[str, ...] = (
    "in the kitchen",
    "at the market square",
    "on the stage",
    "at the harbour",
    "in the library",
    "in the garden",
    "in the workshop",
    "in the stadium tunnel",
    "on the train platform",
    "in the studio",
    "on the riverbank",
    "on the rooftop",
    "in the classroom",
    "in the courtyard",
)
SIDES: tuple[str, ...] = ("to the left of", "to the right of", "behind", "in front of")
COUNTABLES: tuple[str, ...] = (
    "cups",
    "chairs",
    "candles",
    "balloons",
    "books",
    "boats",
    "cones",
    "drums",
)
REASONS: tuple[str, ...] = (
    "to get it ready for the next scene",
    "because it was damaged earlier",
    "to show it to the audience",
    "to make room on the table",
    "to check that it still works",
    "because someone asked for it",
    "to keep it away from the rain",
    "to win the bet with a friend",
)
PURPOSES: tuple[str, ...] = (
    "storing small tools",
    "signalling the start of the event",
    "carrying water to the plants",
    "measuring the ingredients",
    "keeping the notes dry",
    "marking the finish line",
    "holding the prize money",
    "lighting the dark corner",
)
TOPICS: tuple[str, ...] = (
    "how a small team prepares for a local festival",
    "a day of repairs in a busy workshop",
    "a guided walk through an old harbour town",
    "the rehearsal and premiere of a short performance",
    "a friendly competition between two neighbourhood clubs",
    "a lesson on caring for a community garden",
    "the history behind a family recipe",
    "a trip to collect materials for a craft project",
    "a market day seen from a vendor's stall",
    "a training session before an important match",
)
SYLLABLES: tuple[str, ...] = (
    "KA", "LO", "MER", "VI", "DA", "SUN", "TOR", "EL", "BRA", "NO", "QUI", "ZEN", "RO", "PAL",
)  # fmt: skip
SIGNS: tuple[str, ...] = ("sign", "banner", "board", "label", "screen")
FILLER_SUBTITLES: tuple[str, ...] = (
    "Okay, let's keep going.",
    "You can see it better from here.",
    "That took longer than we planned.",
    "Everyone, this way please.",
    "Now watch this part carefully.",
    "We will come back to that later.",
)
