"""An OpenAI-compatible server that validates every request the strict way (127.0.0.1, real HTTP).

A helper module for the protocol tests (issue 17.3), no tests here. Modelled on the request
models of llama-cpp-python's server (``llama_cpp/server/types.py`` ``CreateChatCompletionRequest``
and the message TypedDicts of ``llama_cpp/llama_types.py``), made stricter where the OpenAI API
is stricter, with our own pydantic models (``extra="forbid"``, strict types):

* every message ``content`` is a string (a user turn may also be a list of text / image parts);
  ``null`` is refused with "Input should be a valid string" — the reply that stopped every
  rollout at its second model call against llama-cpp-python (issue 17);
* an assistant turn's ``tool_calls`` (when present) is a non-empty list of
  ``{"id": str, "type": "function", "function": {"name": str, "arguments": str}}``;
* a tool turn has ``tool_call_id`` and ``name`` (llama-cpp-python's
  ``ChatCompletionRequestToolMessage`` requires the key) and answers a call of the preceding
  assistant turn; every call is answered before the next non-tool turn (the OpenAI API's rule);
* no unknown field anywhere; ``temperature`` in [0, 2], ``max_tokens`` >= 1, ``seed`` an integer.

Invalid requests get the body the real server would send. ``style="llama_cpp"`` (default):
llama-cpp-python's route handler turns FastAPI's ``RequestValidationError`` into HTTP 500
``{"error": {"message": "<n> validation errors:\\n  {...}", "type": "internal_server_error",
"param": null, "code": null}}``; ``style="fastapi"``: HTTP 422 ``{"detail": [...]}``;
``style="openai"``: HTTP 400 with an ``invalid_request_error``. The message-order rule is an OpenAI
rule and always answers HTTP 400.

Valid requests are answered by a *script*: a function of the validated request returning the
reply (:func:`default_script` plays a short agent episode with tools and answers the diagnose,
evolve and momentum calls, malformed first so the repair turn is exercised).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trm_assets_tests.llm.test_openai_compat_server import completion, local_server

Style = Literal["llama_cpp", "fastapi", "openai"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FunctionCall(_Strict):
    name: str = Field(min_length=1)
    arguments: str


class ToolCallModel(_Strict):
    id: str = Field(min_length=1)
    type: Literal["function"]
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system"]
    content: str


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImageUrl(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] = "auto"


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: ImageUrl


class UserMessage(_Strict):
    role: Literal["user"]
    content: str | list[Annotated[TextPart | ImagePart, Field(discriminator="type")]]


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: str
    tool_calls: list[ToolCallModel] | None = Field(None, min_length=1)

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _present_means_a_list(cls, v: Any) -> Any:
        if v is None:  # absent is fine; an explicit null is not (llama-cpp-python: NotRequired)
            raise ValueError("Input should be a valid list")
        return v


class ToolMessage(_Strict):
    role: Literal["tool"]
    content: str
    tool_call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any]


class ToolDef(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class ChatRequest(_Strict):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolDef] | None = Field(None, min_length=1)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    stream: Literal[False] = False


Script = Callable[[ChatRequest], dict[str, Any]]


@dataclass
class StrictOpenAI:
    """The running server: its URL, the accepted requests and the rejected ones."""

    url: str = ""
    accepted: list[ChatRequest] = field(default_factory=list)
    rejected: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (status, body)


def _fastapi_errors(e: ValidationError) -> list[dict[str, Any]]:
    """pydantic errors as FastAPI reports a request body's (``loc`` starts with ``"body"``)."""
    return [
        {"type": x["type"], "loc": ("body", *x["loc"]), "msg": x["msg"], "input": x.get("input")}
        for x in e.errors(include_url=False, include_context=False)
    ]


def validation_error_reply(e: ValidationError, style: Style) -> tuple[int, dict[str, Any]]:
    """The status and body the real server sends for a request that fails validation."""
    errors = _fastapi_errors(e)
    if style == "fastapi":
        return 422, {"detail": [{**x, "loc": list(x["loc"])} for x in errors]}
    if style == "openai":
        first = errors[0]
        param = ".".join(str(p) for p in first["loc"][1:])
        return 400, {
            "error": {
                "message": f"Invalid value for '{param}': {first['msg']}",
                "type": "invalid_request_error",
                "param": param,
                "code": None,
            }
        }
    n = len(errors)
    message = f"{n} validation error{'s' if n != 1 else ''}:\n" + "".join(
        f"  {x}\n" for x in errors
    )
    return 500, {
        "error": {
            "message": message.rstrip(),
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }


def order_problem(req: ChatRequest) -> str | None:
    """The OpenAI message-order rule: tool turns answer the preceding assistant's calls, all of
    them, before any other turn."""
    pending: set[str] = set()
    for i, m in enumerate(req.messages):
        if isinstance(m, ToolMessage):
            if m.tool_call_id not in pending:
                return (
                    f"messages.[{i}]: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'"
                )
            pending.discard(m.tool_call_id)
            continue
        if pending:
            return (
                f"messages.[{i}]: an assistant message with 'tool_calls' must be followed by tool "
                f"messages responding to each 'tool_call_id' (missing: {sorted(pending)})"
            )
        if isinstance(m, AssistantMessage) and m.tool_calls:
            pending = {c.id for c in m.tool_calls}
    return None


# ------------------------------------------------------------------------------------------------
# the default script


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


AGENT_TURNS: tuple[tuple[str | None, tuple[tuple[str, dict[str, Any]], ...]], ...] = (
    (None, (("get_overview", {}),)),
    (
        "Two calls at once.",
        (
            ("search_captions", {"query": "chef"}),
            ("inspect_frames", {"question": "plate colour?", "start": 70, "end": 110}),
        ),
    ),
    (None, (("answer", {"letter": "maybe B"}),)),  # a bad argument: a tool error, then again
    (None, (("answer", {"letter": "B"}),)),
)


def agent_turn(req: ChatRequest) -> dict[str, Any]:
    """Turn ``k`` of :data:`AGENT_TURNS`, ``k`` = the assistant turns already in the request."""
    k = sum(1 for m in req.messages if isinstance(m, AssistantMessage))
    content, calls = AGENT_TURNS[min(k, len(AGENT_TURNS) - 1)]
    return completion(
        content, [_call(10 * k + j, n, a) for j, (n, a) in enumerate(calls)], usage=(50, 5)
    )


def structured_turn(req: ChatRequest) -> dict[str, Any]:
    """A diagnose / evolve / momentum call: prose first (the caller repairs), then valid JSON."""
    if len(req.messages) == 1:
        return completion("Here is my analysis, in prose instead of JSON.")
    first = req.messages[0]
    prompt = first.content if isinstance(first, UserMessage) else ""
    assert isinstance(prompt, str)
    if '"diagnoses"' in prompt:
        return completion(json.dumps({"diagnoses": []}))
    if '"guidance"' in prompt:
        return completion(json.dumps({"guidance": "- Count each object once."}))
    return completion(json.dumps({"edits": []}))


def default_script(req: ChatRequest) -> dict[str, Any]:
    return agent_turn(req) if req.tools else structured_turn(req)


@contextmanager
def strict_openai(
    script: Script = default_script, style: Style = "llama_cpp"
) -> Iterator[StrictOpenAI]:
    """Serve ``POST /v1/chat/completions`` on 127.0.0.1 (ephemeral port) until the block ends."""
    state = StrictOpenAI()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/chat/completions":
                self._send(404, {"detail": "Not Found"})
                return
            try:
                req = ChatRequest.model_validate_json(raw)
            except ValidationError as e:
                status, body = validation_error_reply(e, style)
                with lock:
                    state.rejected.append((status, body))
                self._send(status, body)
                return
            problem = order_problem(req)
            if problem is not None:
                body = {"error": {"message": problem, "type": "invalid_request_error"}}
                with lock:
                    state.rejected.append((400, body))
                self._send(400, body)
                return
            with lock:
                state.accepted.append(req)
            self._send(200, script(req))

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with local_server(Handler) as origin:
        state.url = f"{origin}/v1"
        yield state
