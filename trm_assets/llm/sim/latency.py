"""The simulated latency's clock: wake a coroutine when its simulated reply is due.

``asyncio.sleep`` rounds the event loop's wait up to the millisecond (epoll), so simulated
replies came ≈ 0.5 ms late on average — time that ``trm bench overhead`` then counted as the
harness's own, although a real server's reply wakes the loop when it arrives (the socket becomes
readable). One daemon thread per process waits on a condition (a timed wait precise to ≈ 0.1 ms)
and hands each due future back to its event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import threading
import time


class _Waker:
    """Wakes a coroutine at a ``perf_counter`` time within ≈ 0.1 ms, as a real server's reply
    does when it arrives (the socket becomes readable). ``asyncio.sleep`` rounds the event
    loop's wait up to the millisecond: simulated replies came ≈ 0.5 ms late on average, time a
    benchmark of the harness then counted as the harness's own. One daemon thread per process
    waits on a condition (a precise timed wait) and hands each due future back to its loop."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._cv = threading.Condition()
        self._seq = 0
        self._thread: threading.Thread | None = None

    async def until(self, when: float) -> None:
        if when <= time.perf_counter():
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cv:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sim-latency", daemon=True)
                self._thread.start()
            self._seq += 1
            heapq.heappush(self._due, (when, self._seq, loop, fut))
            self._cv.notify()
        await fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._due:
                    self._cv.wait()
                wait = self._due[0][0] - time.perf_counter()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                now = time.perf_counter()
                ready = []
                while self._due and self._due[0][0] <= now:
                    ready.append(heapq.heappop(self._due))
            for _, _, loop, fut in ready:
                with contextlib.suppress(RuntimeError):  # its loop has closed meanwhile
                    loop.call_soon_threadsafe(_wake, fut)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


_WAKER = _Waker()


async def wake_at(when: float) -> None:
    """Return at ``time.perf_counter() >= when`` (at once if it has passed)."""
    await _WAKER.until(when)
