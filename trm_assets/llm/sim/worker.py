"""``SimWorkerProvider``: the simulated world computed in its own process, like a remote server.

In process, the simulator's CPU runs on the loop's event-loop thread: while it computes one
reply, no other rollout's reply is handled, so with 32 calls in flight its compute delays the
other 31 — a remote server's compute runs on the server, beside the client. ``trm bench
overhead`` measures the harness's own time against the model's latency, so it runs the world in
a worker process (``docs/decision-overhead-sim-worker.md``): each request goes over a pipe, the
worker decides it with :meth:`SimulatedProvider.attempt` (the same digest, attempt counter,
latency and fault draws, the same reply), and the caller waits out the rest of the latency with
:func:`~trm_assets.llm.sim.provider.complete`, as the in-process provider does. Same requests,
same replies, usage, errors and latencies, bit for bit; only which CPU computes them differs.

The pipe is read by a thread in the worker, so a burst of requests never blocks the caller on a
full pipe while the worker computes; replies are read on the caller's event loop
(``add_reader``), so no thread of the caller touches the GIL per call.

The transport costs the caller little, as a remote server's would: replies are read in bulk,
and a request carries only what the worker does not hold yet — the tool list when it changed,
and of the messages those after the ones already sent in the same conversation (keyed by the
call's ``seed``, compared by value: a conversation that was not extended is sent whole). The
worker rebuilds the very same lists, so its replies are the in-process provider's bit for bit.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import queue
import socket
import struct
import subprocess
import sys
import threading
from collections import OrderedDict
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from trm_assets.llm.protocol import Message, ToolSpec
from trm_assets.llm.sim.provider import (
    SIM_MODEL,
    Attempt,
    SimProviderBase,
    SimulatedProvider,
)
from trm_assets.llm.sim.world import load_world
from trm_assets.llm.sim_config import SimConfig

_STOP = None
_SAME = "same-tools"  # the tool list of the previous request
_CONVERSATIONS = 4096  # conversations whose messages the worker keeps (the caller evicts)


def _serve(conn: Connection, ground_truth: str, config_json: str, model: str) -> None:
    """The worker: requests in arrival order, one :class:`Attempt` back per request."""
    provider = SimulatedProvider(
        load_world(ground_truth), SimConfig.model_validate_json(config_json), model=model
    )
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def read() -> None:  # drain the pipe as fast as it fills
        try:
            while True:
                inbox.put(conn.recv())
        except (EOFError, OSError):
            inbox.put(_STOP)

    threading.Thread(target=read, name="sim-worker-read", daemon=True).start()
    conn.send("ready")
    convs: dict[int, list[Message]] = {}
    tools: list[ToolSpec] | None = None
    while (item := inbox.get()) is not _STOP:
        rid, conv, keep, new, new_tools, dropped, seed, temperature = item
        for key in dropped:
            convs.pop(key, None)
        if new_tools != _SAME:  # (a string: it crosses the pipe by value)
            tools = new_tools
        messages = [*convs.get(conv, [])[:keep], *new] if conv is not None else list(new)
        if conv is not None:
            convs[conv] = messages
        try:
            out: Any = provider.attempt(messages, tools, seed, temperature)
        except Exception as e:  # a bug: the caller raises it
            out = RuntimeError(f"simulator worker: {type(e).__name__}: {e}")
        conn.send((rid, out))


class SimWorkerProvider(SimProviderBase):
    """An :class:`~trm_assets.llm.protocol.LLMProvider` whose world lives in a worker process.

    ``ground_truth``: the world's ``ground_truth.json``; ``config``: the ``sim`` knobs. Close it
    (or use it as a context manager) to stop the worker; a worker whose caller died sees the
    socket close and exits.
    """

    def __init__(
        self, ground_truth: str | Path, config: SimConfig | None = None, *, model: str = SIM_MODEL
    ) -> None:
        super().__init__(model)
        self.config = config or SimConfig()
        # a fresh interpreter on one end of a socket pair: no fork of a process with threads, and
        # unlike multiprocessing's spawn no re-import of the caller's __main__
        ours, theirs = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno()), str(ground_truth), model],
            stdin=subprocess.PIPE,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        assert self._proc.stdin is not None
        self._proc.stdin.write(self.config.model_dump_json().encode())
        self._proc.stdin.close()
        self._conn = Connection(ours.detach())
        if not self._conn.poll(120) or self._conn.recv() != "ready":
            self.close()
            raise RuntimeError("the simulator worker did not start within 120 s")
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Attempt]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # replies are read in bulk without blocking (a duplicate of the socket, so the
        # connection's own descriptor stays blocking for the sends) and split into the
        # connection's frames here: one read per wake-up, not a poll and two reads per reply
        self._reader = socket.socket(fileno=os.dup(self._conn.fileno()))
        self._inbox = bytearray()
        # what the worker holds: each conversation's messages sent so far (by seed, oldest
        # first), the last tool list, and conversations evicted here for it to drop
        self._sent: OrderedDict[int, list[Message]] = OrderedDict()
        self._tools: list[ToolSpec] | None = None
        self._dropped: list[int] = []

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read replies on ``loop`` (each ``asyncio.run`` of the loop is a new event loop)."""
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._conn.fileno())
        loop.add_reader(self._conn.fileno(), self._on_readable)
        self._loop = loop

    def _on_readable(self) -> None:
        try:
            for rid, out in self._replies():
                fut = self._pending.pop(rid, None)
                if fut is None or fut.done():
                    continue
                if isinstance(out, BaseException):
                    fut.set_exception(out)
                else:
                    fut.set_result(out)
        except (EOFError, OSError):
            err = RuntimeError("the simulator worker exited")
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(err)
            self._pending.clear()
            if self._loop is not None:
                self._loop.remove_reader(self._conn.fileno())

    def _replies(self) -> list[Any]:
        """Every whole reply the socket holds now (``multiprocessing.connection`` frames: a
        4-byte big-endian length, or -1 and an 8-byte one, then the pickle)."""
        while True:
            try:
                chunk = self._reader.recv(1 << 20, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            if not chunk:
                raise EOFError
            self._inbox += chunk
        out = []
        buf, pos = self._inbox, 0
        while len(buf) - pos >= 4:
            (size,) = struct.unpack_from("!i", buf, pos)
            head = 4
            if size == -1:
                if len(buf) - pos < 12:
                    break
                (size,) = struct.unpack_from("!Q", buf, pos + 4)
                head = 12
            if len(buf) - pos - head < size:
                break
            out.append(pickle.loads(buf[pos + head : pos + head + size]))
            pos += head + size
        del buf[:pos]
        return out

    async def _decide(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        seed: int | None,
        temperature: float | None,
    ) -> Attempt:
        """The call decided in the worker (the caller waits it out in :meth:`chat`)."""
        loop = asyncio.get_running_loop()
        self._listen(loop)
        rid = next(self._ids)
        try:
            self._conn.send((rid, *self._delta(messages, tools, seed), seed, temperature))
        except OSError as e:
            raise RuntimeError(f"the simulator worker exited ({e})") from None
        # registered after the send: the reply is read on this loop, so not before the await
        fut: asyncio.Future[Attempt] = loop.create_future()
        self._pending[rid] = fut
        attempt = await fut
        if attempt.response is not None:
            self._count(attempt.response.usage)
        return attempt

    def _delta(
        self, messages: list[Message], tools: list[ToolSpec] | None, seed: int | None
    ) -> tuple[int | None, int, list[Message], Any, list[int]]:
        """(conversation, messages the worker keeps, messages to add, tools or ``_SAME``,
        conversations to drop) for this request: only what the worker does not hold yet."""
        new_tools: Any = _SAME
        if tools != self._tools:
            self._tools = new_tools = tools
        dropped, self._dropped = self._dropped, []
        if seed is None:
            return None, 0, list(messages), new_tools, dropped
        prev = self._sent.pop(seed, [])
        keep = 0
        if len(prev) <= len(messages):
            for a, b in zip(prev, messages, strict=False):
                if a != b:
                    break
                keep += 1
        self._sent[seed] = list(messages)
        while len(self._sent) > _CONVERSATIONS:
            self._dropped.append(self._sent.popitem(last=False)[0])
        return seed, keep, list(messages[keep:]), new_tools, dropped

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._conn.fileno())
        self._reader.close()
        self._conn.close()  # the worker sees EOF and exits
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> SimWorkerProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SimWorkerProvider(model={self._model!r}, SIMULATED, worker pid {self._proc.pid})"


if __name__ == "__main__":  # the worker process: fd, ground truth, model; the config on stdin
    _serve(Connection(int(sys.argv[1])), sys.argv[2], sys.stdin.read(), sys.argv[3])
