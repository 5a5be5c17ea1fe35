"""Real Dagster processes for the tests: the webserver, the daemon, and a private PostgreSQL
cluster (Debian's ``postgresql``: initdb in a temp dir, 127.0.0.1 on a free port). Every process
is started in its own session and stopped by its process group id."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(proc: subprocess.Popen[bytes], pgid: int | None = None) -> None:
    """Stop a process group we started (TERM, then KILL)."""
    group = pgid if pgid is not None else proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def dagster_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DAGSTER_HOME"] = str(home)
    env.pop("TRM_DAGSTER_WORKSPACE", None)
    env.pop("TRM_DAGSTER_CONFIG", None)
    return env


@contextlib.contextmanager
def webserver(home: Path, log_dir: Path) -> Iterator[str]:
    port = free_port()
    proc = start(
        [
            str(BIN / "dagster-webserver"),
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        dagster_env(home),
        log_dir / "webserver.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    log = (log_dir / "webserver.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"dagster-webserver did not start:\n{log}") from None
                time.sleep(0.5)
        yield url
    finally:
        stop(proc)


def daemon(home: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    return start(
        [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
        dagster_env(home),
        log_dir / "daemon.log",
    )


# ------------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    db: str

    def storage_yaml(self) -> dict[str, object]:
        """The ``storage:`` section of a dagster.yaml (dagster-postgres)."""
        return {
            "postgres": {
                "postgres_db": {
                    "hostname": self.host,
                    "port": self.port,
                    "username": self.user,
                    "password": "trust",  # trust auth: ignored
                    "db_name": self.db,
                    # SQLAlchemy 2.1's default PostgreSQL driver is psycopg 3; dagster-postgres
                    # installs psycopg2
                    "scheme": "postgresql+psycopg2",
                }
            }
        }

    def create_database(self, name: str) -> Postgres:
        import psycopg2

        with contextlib.closing(
            psycopg2.connect(host=self.host, port=self.port, user=self.user, dbname="postgres")
        ) as con:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        return Postgres(self.host, self.port, self.user, name)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A private PostgreSQL cluster on 127.0.0.1 (initdb in a temp dir, a free port), stopped at
    the end of the session. As root (CI) the server runs as Debian's ``postgres`` user."""
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) are absent: .ci/run installs postgresql")
    as_root = os.geteuid() == 0
    if as_root:
        try:
            pg_user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a 'postgres' user to run the server as")
    base = Path(tempfile.mkdtemp(prefix="trm-pg-"))
    if as_root:
        os.chown(base, pg_user.pw_uid, pg_user.pw_gid)
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    data, port = base / "data", free_port()

    def pg(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    try:
        pg(str(bindir / "initdb"), "-D", str(data), "-U", "trm", "--auth=trust", "-E", "UTF8",
           "--no-sync", "--no-instructions")  # fmt: skip
        options = f"-p {port} -h 127.0.0.1 -k {base} -c fsync=off -c full_page_writes=off"
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "pg.log"),
           "-w", "-t", "60", "start")  # fmt: skip
        try:
            yield Postgres("127.0.0.1", port, "trm", "postgres")
        finally:
            pg(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def postgres_home(directory: Path, pg: Postgres) -> Path:
    """A DAGSTER_HOME: the shipped dagster.yaml (queue, limits) + Postgres storage."""
    directory.mkdir(parents=True)
    cfg = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text(encoding="utf-8"))
    cfg["storage"] = pg.storage_yaml()
    (directory / "dagster.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return directory
