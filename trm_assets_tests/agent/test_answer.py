"""Answer extraction follows Video-MME's official rule (VIDEOMME-NOTES §2.1)."""

from __future__ import annotations

import pytest

from trm_assets.agent.answer import extract_answer_letter, normalize_letter_argument


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("B", "B"),
        ("  C.  ", "C"),
        ("The best answer is D", "D"),
        ("The correct answer is (A) red onions", "A"),
        ("The answer is: C", "C"),
        ("Answer: B", "B"),
        ("Best option: D", "D"),
        # The official quirk: the first capital A-D anywhere, even inside a word.
        ("Based on the video, C", "B"),
        ("According to the captions it is D", "A"),
        ("the chef chops onions, so option c it is", ""),
        ("", ""),
        (None, ""),
        # More than ten words and no capital A-D: no answer.
        ("i think that the chef is chopping some kind of vegetable on the board here", ""),
    ],
)
def test_extract_answer_letter_matches_the_official_rule(text: str | None, letter: str) -> None:
    assert extract_answer_letter(text) == letter


@pytest.mark.parametrize(
    ("value", "letter"),
    [("A", "A"), ("b", "B"), ("(C)", "C"), ("D.", "D"), (" option b ", "B"), ("[A]", "A")],
)
def test_answer_tool_accepts_bare_letters(value: str, letter: str) -> None:
    assert normalize_letter_argument(value) == letter


@pytest.mark.parametrize(
    "value", ["Based on the video, C", "E", "AB", "", 3, None, "A. Red onions"]
)
def test_answer_tool_refuses_anything_but_a_letter(value: object) -> None:
    assert normalize_letter_argument(value) is None
