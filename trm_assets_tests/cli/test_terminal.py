"""`trm train`'s terminal (issue 17.4: "a progress bar on a terminal, periodic lines
otherwise"): tqdm's bar in place on a TTY, output lines above it, none of it off a TTY — checked
on what a terminal would show of the stream's characters and through a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trm_assets.cli.terminal import Terminal, _own_descriptor, bar_postfix
from trm_assets.harness.loop.rollouts import InferenceProgress
from trm_assets_tests.tiny import REPO, SMOKE_CONFIG, TINY

# count, total, cells, ETA or done, the run id (a line cut at the terminal's width ends early)
BAR = re.compile(r"  … (\d+)/(\d+) rollouts \|([# ]{12})\|, (ETA \S+|done), .*: (\S+)$")


def _p(done: int, total: int = 40) -> InferenceProgress:
    return InferenceProgress("train_e0_s0", done, total, 0, 0, 2.0, done, 100 * done)


def screen(text: str) -> list[str]:
    """The lines a terminal shows of ``text``: a carriage return goes back to the line's start
    and what follows overwrites it (trailing blanks dropped)."""
    lines, col = [""], 0
    for ch in text.replace("\r\n", "\n"):
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("")
            col = 0
        else:
            line = lines[-1]
            lines[-1] = line[:col] + ch + line[col + 1 :]
            col += 1
    return [line.rstrip() for line in lines]


def drawn(text: str) -> list[str]:
    """Every state of the bar line the stream drew, in order (each carriage return redraws)."""
    return [seg for part in text.split("\n") for seg in part.split("\r") if BAR.match(seg)]


def test_the_bar_is_drawn_in_place_and_lines_go_above_it() -> None:
    out = io.StringIO()
    term = Terminal(out, tty=True, width=200)
    term.progress(_p(10), False)
    term.progress(_p(20), False)
    term.echo("a line")
    term.progress(_p(40), True)
    term.echo("after")
    text = out.getvalue()
    assert screen(text) == [
        "a line",  # above the bar
        f"  … 40/40 rollouts |{'#' * 12}|, {bar_postfix(_p(40), True)}",
        "after",  # below the finished bar, which stays as a line
        "",
    ]
    assert bar_postfix(_p(40), True).startswith("done, 40 model calls, 2,000 tokens/s, elapsed")
    states = [(m[1], m[3], m[4]) for m in map(BAR.match, drawn(text)) if m]
    assert states[:2] == [
        ("10", "###" + " " * 9, "ETA 0m06s"),
        ("20", "#" * 6 + " " * 6, "ETA 0m02s"),
    ]
    assert states[-1] == ("40", "#" * 12, "done")


def test_the_bar_fits_the_width_ends_on_close_and_nothing_is_drawn_off_a_tty() -> None:
    out = io.StringIO()
    term = Terminal(out, tty=True, width=40)
    term.progress(_p(5), False)
    assert all(len(seg) <= 40 for seg in out.getvalue().split("\r"))
    term.close()  # an interrupted barrier: the bar ends, the next line starts below it
    term.echo("interrupted")
    assert screen(out.getvalue())[1:] == ["interrupted", ""]
    assert screen(out.getvalue())[0].startswith("  … 5/40 rollouts |#")
    plain = io.StringIO()
    term = Terminal(plain, tty=False)
    term.progress(_p(5), False)
    term.echo("a line")
    assert plain.getvalue() == "a line\n"
    assert Terminal(io.StringIO()).tty is False  # StringIO is not a TTY


def test_warnings_logged_meanwhile_go_above_the_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: an endpoint's retry warning (no handler: Python's fallback on stderr) was glued
    onto the bar's line."""
    import logging

    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    out = io.StringIO()
    term = Terminal(out, tty=True, width=200)
    with term.logging():
        term.progress(_p(10), False)
        logging.getLogger("trm_assets.llm").warning("HTTP 503 (attempt 1/5); retrying")
        logging.getLogger("trm_assets.llm").info("not shown: below the fallback's level")
        term.progress(_p(40), True)
    assert logging.getLogger().handlers == []  # removed again
    assert screen(out.getvalue()) == [
        "HTTP 503 (attempt 1/5); retrying",
        f"  … 40/40 rollouts |{'#' * 12}|, {bar_postfix(_p(40), True)}",
        "",
    ]


def test_a_display_error_stops_the_bar_and_never_reaches_the_barrier() -> None:
    """Review: a terminal whose encoding lacks "…" made the bar raise inside the barrier. A
    terminal of its own replaces such characters; any other display error stops drawing."""
    strict = io.TextIOWrapper(io.BytesIO(), encoding="latin-1", errors="strict")
    term = Terminal(strict, tty=True, width=100)
    term.progress(_p(10), False)  # UnicodeEncodeError inside tqdm: caught
    assert term.tty is False
    term.progress(_p(20), False)  # and nothing more is drawn
    read, write = os.pipe()
    latin = io.TextIOWrapper(io.FileIO(write, "w"), encoding="latin-1")
    own = _own_descriptor(latin)  # what Terminal() opens on a TTY
    own.write("… done\n")
    own.close()
    latin.close()
    assert os.read(read, 100) == b"? done\n"
    os.close(read)


def _run(tmp_path: Path, command: list[str], *, tty: bool) -> str:
    """``trm <command>`` on the smoke sample with every model call taking 0.35 s (a rollout ≥ 1.05
    s in one wave, so each barrier lasts past the bar's 1 s), its stdout a pseudo-terminal or a
    pipe. The output as text."""
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "200", "TRM_PROGRESS_EVERY_S": "0.5"}
    env["DAGSTER_HOME"] = str(tmp_path / "dagster_home")
    cmd = [sys.executable, "-m", "trm_assets.cli", *command, "--config", str(SMOKE_CONFIG)]
    sets = [*TINY, "epochs=1", "steps_per_epoch=1", "gate_policy=accept_all", "concurrency=64"]
    sets += ["sim.latency_ms_mean=350", "sim.latency_ms_jitter=0"]
    cmd += [a for kv in sets for a in ("--set", kv)]
    if not tty:
        res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=follower, stderr=follower)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    assert proc.wait(timeout=60) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_trm_eval_draws_a_bar_on_a_terminal_and_prints_lines_through_a_pipe(
    tmp_path: Path,
) -> None:
    """A real pseudo-terminal: the barrier's bar is rewritten in place and ends full, with no
    periodic line as well; through a pipe the periodic lines, with no escape code. (The bar
    through Dagster, as `trm train` drives it, is `test_dagster_training.py`'s.)"""
    ws = str(tmp_path / "ws")
    init = ["init", "--workspace", ws, "--config", str(SMOKE_CONFIG)]
    subprocess.run(
        [sys.executable, "-m", "trm_assets.cli", *init],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    command = ["eval", "--workspace", ws, "--version", "v1", "--pool", "validation"]
    on_tty = _run(tmp_path, command, tty=True)
    states = [m for m in map(BAR.match, drawn(on_tty)) if m]
    assert len(states) >= 2, on_tty  # drawn, then redrawn in place
    for m in states:  # one barrier; the bar's cells follow its count
        assert m[5].startswith("eval_v1_") and m[3].count("#") == int(12 * int(m[1]) / int(m[2]))
    bars = [m for m in map(BAR.match, screen(on_tty)) if m]
    assert len(bars) == 1 and bars[0][4] == "done", on_tty  # one line left, finished
    assert bars[0][1] == bars[0][2]
    periodic = [line for line in screen(on_tty) if line.startswith("  … ") and not BAR.match(line)]
    assert not periodic, on_tty  # no periodic line as well
    assert "accuracy" in on_tty and "Traceback" not in on_tty
    test_pool = [*command[:-1], "test"]  # another run: not served from the first
    piped = _run(tmp_path, test_pool, tty=False)
    assert "\x1b" not in piped and "\r" not in piped
    periodic = [ln for ln in piped.splitlines() if ln.startswith("  … ")]
    assert periodic and periodic[-1].endswith("— done"), piped
