"""The simulator encodes a request once: the digest, the agent's conversation key and the
prompt's token count computed from the per-message encodings equal the plain formulas."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trm_assets.llm.protocol import Message, ToolSpec
from trm_assets.llm.sim.draws import digest
from trm_assets.llm.sim.provider import encode_request, request_digest
from trm_assets.llm.sim.roles import first_line

_text = st.text(max_size=40)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text)
_value = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_message = st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "zz"]), _value)
_messages = st.lists(_message, max_size=6)
_tools = st.one_of(st.none(), st.lists(st.dictionaries(_text, _value, max_size=3), max_size=3))


def _plain_digest(messages: list[dict[str, Any]], tools: Any, seed: int | None) -> str:
    return digest(
        json.dumps(list(messages), sort_keys=True, default=str),
        json.dumps(list(tools or ()), sort_keys=True, default=str),
        seed,
    )


@settings(max_examples=300, deadline=None)
@given(_messages, _tools, st.one_of(st.none(), st.integers(0, 10**6)))
def test_encoded_digest_and_prompt_length_equal_the_plain_formulas(
    messages: list[Message], tools: list[ToolSpec] | None, seed: int | None
) -> None:
    encoded = encode_request(messages, tools)
    assert request_digest(messages, tools, seed, encoded=encoded) == _plain_digest(
        messages, tools, seed
    )
    assert request_digest(messages, tools, seed) == _plain_digest(messages, tools, seed)
    unsorted = json.dumps(list(messages), default=str) + json.dumps(list(tools or ()), default=str)
    assert encoded.prompt_chars == len(unsorted)


_tool_list = st.lists(st.dictionaries(_text, _value, min_size=1, max_size=3), max_size=3)


@settings(max_examples=300, deadline=None)
@given(_tool_list, _tool_list)
def test_a_tool_list_sent_again_encodes_as_the_plain_formula_also_changed_in_place(
    a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> None:
    """The provider reuses the last tool list's encoding for the same object: sent again
    unchanged, changed inside one of its dicts, or given new contents, it encodes as
    ``json.dumps`` does."""

    def plain(tools: list[dict[str, Any]]) -> str:
        return json.dumps(tools, sort_keys=True, default=str)

    # the documented blind spot of ``==`` (True == 1 == 1.0 encode differently): not generated
    assume(a != b or plain(a) == plain(b))
    tools: list[Any] = copy.deepcopy(a)
    assert encode_request([], tools).tools == plain(tools)
    assert encode_request([], tools).tools == plain(tools)  # served again
    if tools:
        first = tools[0]
        k = next(iter(first))
        first[k] = {"changed": [first[k]]}  # nested, in place
        assert encode_request([], tools).tools == plain(tools)
    tools[:] = copy.deepcopy(b)
    assert encode_request([], tools).tools == plain(tools)
    assert encode_request([], None).tools == "[]"


def test_a_known_request_keeps_its_digest() -> None:
    """Pinned value: the digest feeds every simulated draw (the committed figures depend on it)."""
    messages: list[Message] = [
        {"role": "system", "content": "You answer questions about videos."},
        {"role": "user", "content": "Question: what happens first? é"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    ]
    tools: list[ToolSpec] = [
        {"type": "function", "function": {"name": "answer", "description": "Answer."}}
    ]
    assert request_digest(messages, tools, 7) == _plain_digest(messages, tools, 7)
    assert request_digest(messages, tools, 7)[:16] == "1d105960c0467384"


_line_chars = st.sampled_from(list("ab \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029x"))


@settings(max_examples=500, deadline=None)
@given(st.text(_line_chars, max_size=30) | st.text(max_size=30))
def test_first_line_equals_the_splitlines_formula(text: str) -> None:
    plain = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    assert first_line(text) == plain
