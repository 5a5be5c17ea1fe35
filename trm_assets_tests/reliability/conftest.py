"""Shared helpers of the reliability tests (issue 9): a tiny training config on the SIMULATED
smoke sample, workspace snapshots, and ``trm sim-serve`` as a bounded child process."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trm_assets_tests.tiny import (
    REPO,
    _repo_cwd,  # noqa: F401 - registers the autouse fixture here
)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its bytes' SHA-256 (directories as ``<dir>``)."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = f"-> {os.readlink(p)}"
        elif p.is_dir():
            out[rel] = "<dir>"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process, without any inherited TRM_/OPENAI_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRM_", "OPENAI_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_child(
    argv: Sequence[str], *, timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python argv…`` from the repository, bounded, its output captured; ``env`` defaults to
    :func:`child_env`."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO,
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@dataclass
class SimServer:
    base_url: str
    proc: subprocess.Popen[str]
    log_path: Path


@contextmanager
def sim_server(log_path: Path, *args: str, startup_s: float = 30.0) -> Iterator[SimServer]:
    """``trm sim-serve`` on 127.0.0.1 with an ephemeral port; its output goes to ``log_path``.
    Startup and shutdown are bounded."""
    log = log_path.open("w", encoding="utf-8")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trm_assets.cli",
            "sim-serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            *args,
        ],
        cwd=REPO,
        env=child_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + startup_s
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"http://127\.0\.0\.1:\d+/v1", log_path.read_text(encoding="utf-8"))
            url = m.group(0) if m else None
            if url is None:
                time.sleep(0.1)
        if url is None:
            raise RuntimeError(f"sim-serve did not start: {log_path.read_text(encoding='utf-8')}")
        yield SimServer(url, proc, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def run_cli(
    args: list[str], env: dict[str, str], timeout_s: float, log_path: Path
) -> subprocess.CompletedProcess[str]:
    """One ``trm`` subcommand as a child process (bounded), its output also saved to a log."""
    res = run_child(["-m", "trm_assets.cli", *args], timeout_s=timeout_s, env=env)
    log_path.write_text(res.stdout + "\n--- stderr ---\n" + res.stderr, encoding="utf-8")
    return res
