"""Answer-letter extraction, compatible with Video-MME's official scorer.

The official rule is ``extract_characters_regex`` in ``BradyFU/Video-MME``
(``evaluation/eval_your_results.py``), identical in lmms-eval (VIDEOMME-NOTES §2.1):

1. strip the text;
2. delete every occurrence of a short list of answer prefixes (``"The best answer is"``, …);
3. if more than ten words remain and no capital A–D occurs, return ``""``;
4. otherwise return the first capital A, B, C or D **anywhere** in the text, or ``""``.

Our prefix list is the official one with its two accidental string concatenations (missing commas
in the source) split back into the intended entries, plus VLMEvalKit's ``"Answer:"`` /
``"Option:"`` and the later official ``"The correct answer"`` / ``"The correct option"``. Longer
prefixes are removed before their own prefixes so ``"The answer is"`` is not left as ``" is"``.

Because rule 4 takes the first capital anywhere ("Based on the video, C" → ``"B"``), the agent is
asked to answer through the ``answer`` tool with a bare letter; this extraction is only the
fallback when a model replies in free text.
"""

from __future__ import annotations

import re

ANSWER_PREFIXES: tuple[str, ...] = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The best option is",
    "The correct option is",
    "The correct answer",
    "The correct option",
    "The answer",
    "Best answer:",
    "Best option:",
    "Answer:",
    "Option:",
)
_LETTER_RE = re.compile(r"[ABCD]")
# A bare letter as a tool argument: "B", "b", "(B)", "B.", " B) ", "Option B".
_BARE_LETTER_RE = re.compile(r"^\s*(?:option\s+)?[\(\[]?\s*([ABCDabcd])\s*[\)\]\.:]?\s*$", re.I)


def extract_answer_letter(text: str | None) -> str:
    """The answer letter of a free-text reply by the Video-MME rule, or ``""`` if there is none."""
    if not text:
        return ""
    s = text.strip()
    for prefix in ANSWER_PREFIXES:
        s = s.replace(prefix, "")
    match = _LETTER_RE.search(s)
    if len(s.split()) > 10 and match is None:
        return ""
    return match.group(0) if match else ""


def normalize_letter_argument(value: object) -> str | None:
    """The letter of an ``answer`` tool argument (``"B"``, ``"b"``, ``"(B)"``, ``"B."``), or None.

    Stricter than :func:`extract_answer_letter`: a tool argument must *be* a letter, so a sentence
    such as ``"Based on the video, C"`` is refused (the loop returns a tool error and the model
    can call ``answer`` again) instead of being read as ``"B"``.
    """
    if not isinstance(value, str):
        return None
    m = _BARE_LETTER_RE.match(value)
    return m.group(1).upper() if m else None
