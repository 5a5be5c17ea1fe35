"""`trm train`'s terminal (issue 17.4: "a progress bar on a terminal, periodic lines
otherwise"): the bar in place on a TTY, output lines above it, none of it off a TTY — checked on
the stream's bytes and through a real pseudo-terminal."""

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

from trm_assets.cli.terminal import Terminal, render_bar
from trm_assets.harness.loop.rollouts import InferenceProgress
from trm_assets_tests.tiny import REPO, SMOKE_CONFIG, TINY

CLEAR = "\r\x1b[2K"


def _p(done: int, total: int = 40) -> InferenceProgress:
    return InferenceProgress("train_e0_s0", done, total, 0, 0, 2.0, done, 100 * done)


def test_the_bar_is_drawn_in_place_and_lines_go_above_it() -> None:
    out = io.StringIO()
    term = Terminal(out, tty=True, width=200)
    term.progress(_p(10), False)
    term.progress(_p(20), False)
    term.echo("a line")
    term.progress(_p(40), True)
    term.echo("after")
    bar10, bar20, bar40 = (render_bar(_p(n), 200) for n in (10, 20, 40))
    assert bar10.startswith("  … [#####...............] train_e0_s0: 10/40 rollouts")
    assert bar40.startswith("  … [####################] train_e0_s0: 40/40 rollouts")
    assert out.getvalue() == (
        f"{CLEAR}{bar10}{CLEAR}{bar20}"  # rewritten in place
        f"{CLEAR}a line\n{bar20}"  # the line above, the bar below it again
        f"{CLEAR}{bar40} — done\n"  # the finished bar stays as a line
        "after\n"  # no bar left to clear
    )


def test_the_bar_fits_the_width_and_nothing_is_drawn_off_a_tty() -> None:
    out = io.StringIO()
    Terminal(out, tty=True, width=40).progress(_p(5), False)
    assert out.getvalue() == CLEAR + render_bar(_p(5), 40) and len(render_bar(_p(5), 40)) == 39
    plain = io.StringIO()
    term = Terminal(plain, tty=False)
    term.progress(_p(5), False)
    term.echo("a line")
    assert plain.getvalue() == "a line\n"
    assert Terminal(io.StringIO()).tty is False  # StringIO is not a TTY


def _run(tmp_path: Path, command: list[str], *, tty: bool) -> str:
    """``trm <command>`` on the smoke sample with every model call taking 0.35 s (a rollout ≥ 1.05
    s in one wave, so each barrier lasts past the bar's 1 s), its stdout a pseudo-terminal or a
    pipe. The output as text."""
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "160", "TRM_PROGRESS_EVERY_S": "0.5"}
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
    bars = re.findall(r"\x1b\[2K  … \[([#.]{20})\] (\w+): (\d+)/(\d+) rollouts", on_tty)
    finished = re.findall(
        r"\x1b\[2K  … \[#{20}\] (\w+): (\d+)/(\d+) rollouts[^\r\n]* — done\r?\n", on_tty
    )
    assert len(bars) >= 2 and len(finished) == 1, on_tty  # drawn, then finished, in place
    (run, n, total) = finished[0]
    assert run.startswith("eval_v1_") and n == total, on_tty
    for cells, _, n, total in bars:  # the bar's cells follow its count
        assert cells.count("#") == round(20 * int(n) / int(total))
    lines = on_tty.replace("\x1b[2K", "").split("\r\n")
    assert not [ln for ln in lines if ln.startswith("  … ")], on_tty  # no periodic line as well
    assert "accuracy" in on_tty and "Traceback" not in on_tty
    test_pool = [*command[:-1], "test"]  # another run: not served from the first
    piped = _run(tmp_path, test_pool, tty=False)
    assert "\x1b" not in piped and "\r" not in piped
    periodic = [ln for ln in piped.splitlines() if ln.startswith("  … ")]
    assert periodic and periodic[-1].endswith("— done"), piped
