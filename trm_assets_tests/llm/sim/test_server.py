"""``trm sim-serve``: a real OpenAI SDK client (and the project's provider) over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from trm_assets.agent.messages import load_agent_prompts
from trm_assets.agent.tools import tool_specs
from trm_assets.cli.sim import served_model_name
from trm_assets.llm.protocol import InfraError
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.server import ServeOptions, SimServer
from trm_assets.llm.sim.world import SimWorld
from trm_assets.llm.sim_config import SimConfig

from .conftest import PROMPTS, REPO, SMOKE


def _agent_start(world: SimWorld) -> tuple[list[Any], list[Any]]:
    qid = world.question_ids()[0]
    q = world.questions[qid]
    messages: list[Any] = [
        {"role": "system", "content": (PROMPTS / "agent_system.md").read_text()},
        {
            "role": "user",
            "content": f"Question id: {qid}\nVideo id: {q.videoID}\nTask type: {q.task_type}\n"
            "Question: ?\nA. a\nB. b\nC. c\nD. d",
        },
    ]
    tools = tool_specs(load_agent_prompts(PROMPTS).tool_descriptions)
    return messages, tools


@pytest.fixture()
def server(smoke_world: SimWorld) -> Iterator[SimServer]:
    with SimServer(SimulatedProvider(smoke_world, inject_faults=False)) as s:
        yield s


def test_openai_client_lists_models_and_round_trips_tool_calls(
    server: SimServer, smoke_world: SimWorld
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="not-used", max_retries=0, timeout=10)
    assert [m.id for m in client.models.list().data] == ["sim-videomme-1"]
    messages, tools = _agent_start(smoke_world)
    names = []
    for _ in range(8):
        resp = client.chat.completions.create(
            model="sim-videomme-1",
            messages=messages,
            tools=tools,
            seed=11,
        )
        assert resp.usage is not None and resp.usage.prompt_tokens > 0
        msg = resp.choices[0].message
        assert msg.tool_calls, msg
        call: Any = msg.tool_calls[0]
        names.append(call.function.name)
        json.loads(call.function.arguments)
        if call.function.name == "answer":
            assert resp.choices[0].finish_reason == "tool_calls"
            break
        messages.append(msg.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"ok": true}'})
    assert names[0] == "get_overview" and names[-1] == "answer"
    # Same conversation in-process gives the same letter: HTTP adds nothing but transport.
    local = SimulatedProvider(smoke_world)
    in_proc = asyncio.run(local.chat(messages, tools=tools, seed=11))
    assert in_proc.tool_calls[0].arguments == call.function.arguments


def test_injected_503_is_a_real_http_error(smoke_world: SimWorld) -> None:
    provider = SimulatedProvider(
        smoke_world, SimConfig(fault_http_5xx_rate=1.0), inject_faults=False
    )
    with SimServer(provider, options=ServeOptions(fault_statuses=(503,))) as s:
        client = openai.OpenAI(base_url=s.base_url, api_key="x", max_retries=0, timeout=10)
        messages, tools = _agent_start(smoke_world)
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model="m", messages=messages, tools=tools)
        assert e.value.status_code == 503


def test_injected_timeout_is_a_real_timeout(smoke_world: SimWorld) -> None:
    provider = SimulatedProvider(
        smoke_world, SimConfig(fault_timeout_rate=1.0), inject_faults=False
    )
    with SimServer(provider, options=ServeOptions(timeout_sleep_s=3.0)) as s:
        client = openai.OpenAI(base_url=s.base_url, api_key="x", max_retries=0, timeout=0.5)
        messages, _ = _agent_start(smoke_world)
        t0 = time.perf_counter()
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="m", messages=messages)
        assert time.perf_counter() - t0 < 2.5


def test_project_provider_maps_server_faults_to_infra_errors(smoke_world: SimWorld) -> None:
    compat = pytest.importorskip("trm_assets.llm.openai_compat")
    messages, tools = _agent_start(smoke_world)
    provider = SimulatedProvider(
        smoke_world, SimConfig(fault_http_5xx_rate=1.0), inject_faults=False
    )
    with SimServer(provider, options=ServeOptions(fault_statuses=(503,))) as s:
        real = compat.OpenAICompatProvider(
            base_url=s.base_url, model="sim-videomme-1", max_retries=0
        )
        with pytest.raises(InfraError) as e:
            asyncio.run(real.chat(messages, tools=tools, seed=1))
        assert e.value.status == 503
    with SimServer(SimulatedProvider(smoke_world, inject_faults=False)) as s:
        real = compat.OpenAICompatProvider(
            base_url=s.base_url, model="sim-videomme-1", max_retries=0
        )
        resp = asyncio.run(real.chat(messages, tools=tools, seed=1))
        assert resp.tool_calls and resp.tool_calls[0].name == "get_overview"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


WORLD = ("--sim", "profile=realistic", "--sim", "length_cost=0.2")


def test_sim_serve_command_answers_plain_http(tmp_path: object) -> None:
    port = _free_port()
    code = "from trm_assets.cli.sim import serve; serve()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--port", str(port), "--data", str(SMOKE), *WORLD],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=1) as r:
                    models = json.loads(r.read())
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        # another world is served under another name (its reuse key differs)
        served = models["data"][0]["id"]
        assert served.startswith("sim-videomme-1-") and len(served) == len("sim-videomme-1-") + 8
        world = SimConfig(profile="realistic", length_cost=0.2)
        assert served == served_model_name(world)
        body = json.dumps({"model": served, "messages": [{"role": "user", "content": "hello"}]})
        req = urllib.request.Request(
            f"{base}/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            reply = json.loads(r.read())
        assert reply["object"] == "chat.completion" and reply["usage"]["total_tokens"] > 0
        assert "simulated" in reply["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a loaded 2-core box: the banner is what is checked
            proc.kill()
            out, _ = proc.communicate(timeout=10)
    assert "SIMULATED" in out
    # the served world is the one asked for (a profile, and a key over it)
    assert "profile realistic, temperature 0 when a request names none" in out
    assert "text flips 0.15, length cost 0.2" in out


def test_the_served_name_follows_the_answers_not_the_timing() -> None:
    """Two servers of one world at other latencies or fault rates give the same answers, so they
    share a name (and the temperature-0 reuse key); a knob that moves an answer changes it."""
    world = SimConfig(profile="realistic")
    slow = SimConfig(profile="realistic", latency_ms_mean=50, fault_timeout_rate=0.1)
    assert served_model_name(world) == served_model_name(slow)
    for other in (
        SimConfig(profile="realistic", length_cost=0.2),
        SimConfig(profile="realistic", temperature_scale=0.5),
        SimConfig(),
    ):
        assert served_model_name(other) != served_model_name(world)
    # temperature_scale at 0 names the world it always named (the identity before the knob)
    assert served_model_name(SimConfig(temperature_scale=0.0)) == served_model_name(SimConfig())


def test_what_counts_as_loopback_and_ipv6_binds(smoke_world: SimWorld) -> None:
    """Hostile pass: `--host ::1` failed ("address family for hostname not supported", an
    IPv4-only server), `LOCALHOST` and `127.1` were warned about as reachable beyond this
    machine, and `''` (every interface) printed "binding :"."""
    from trm_assets.llm.sim.server import is_loopback

    for host in (
        "127.0.0.1",
        "127.1",
        "localhost",
        "LOCALHOST",
        "::1",
        "127.0.0.2",
        "::ffff:127.0.0.1",
    ):
        assert is_loopback(host), host
    for host in ("", "0.0.0.0", "::", "10.1.2.3", "no-such-host.invalid"):
        assert not is_loopback(host), host
    with SimServer(SimulatedProvider(smoke_world, inject_faults=False), host="::1") as s:
        assert s.base_url.startswith("http://[::1]:")
        with urllib.request.urlopen(f"{s.base_url}/models", timeout=5) as r:
            assert json.loads(r.read())["data"]
