"""Click commands of the simulated world, registered by ``trm_assets.cli``:

* ``synth``      → ``trm data synth``  (generate a SIMULATED sample with hidden ground truth)
* ``sim-serve``  → ``trm sim-serve``   (OpenAI-compatible HTTP server backed by the simulator)
* ``sim-oracle`` → ``trm sim-oracle``  (expected accuracy of a skill set, from the ground truth)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from trm_assets.llm.sim_config import SimConfig, answer_world

F = TypeVar("F", bound=Callable[..., Any])


def _data_option(help_text: str | None = None) -> Callable[[F], F]:
    """``--data`` of the commands reading a SIMULATED sample (``data_dir``)."""
    return click.option(
        "--data",
        "data_dir",
        type=click.Path(path_type=Path),
        default=Path("data/default"),
        show_default=True,
        help=help_text,
    )


@click.command("synth")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory.",
)
@click.option("--videos", type=click.IntRange(min=1), required=True, help="Number of videos.")
@click.option(
    "--seed", type=int, required=True, help="Seed of every draw (recorded in the sample)."
)
@click.option("--questions-per-video", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--cues-per-task",
    type=click.IntRange(1, 3),
    default=3,
    show_default=True,
    help="Hidden cues per task type.",
)
def synth(
    out_dir: Path, videos: int, seed: int, questions_per_video: int, cues_per_task: int
) -> None:
    """Generate a SIMULATED Video-MME-format sample: questions.json, trees/, ground_truth.json.

    Deterministic: the same arguments reproduce the sample byte for byte (see its SOURCE.md).
    """
    from trm_assets.llm.sim.generator import synthesize

    s = synthesize(
        out_dir,
        videos=videos,
        seed=seed,
        questions_per_video=questions_per_video,
        cues_per_task=cues_per_task,
    )
    click.echo(f"SIMULATED sample written to {s.out_dir} ({s.bytes_written / 1e6:.2f} MB)")
    click.echo(f"  videos: {s.videos}, questions: {s.questions}, seed: {seed}")
    click.echo("  by duration: " + ", ".join(f"{k} {v}" for k, v in s.by_duration.items()))
    click.echo("  by task type: " + ", ".join(f"{k} {v}" for k, v in s.by_task_type.items()))


DEFAULT_SERVED_MODEL = "sim-videomme-1"

#: SimConfig keys that have their own option on ``sim-serve`` (``--sim`` may not set them too).
_SERVE_KEYS = {
    "seed": "--seed",
    "latency_ms_mean": "--latency-ms",
    "latency_ms_jitter": "--latency-jitter-ms",
    "fault_timeout_rate": "--fault-timeout-rate",
    "fault_http_5xx_rate": "--fault-5xx-rate",
    "fault_malformed_rate": "--fault-malformed-rate",
}

_WORLD = click.option(
    "--sim",
    "world",
    multiple=True,
    metavar="KEY=VALUE",
    help="A key of the simulated world (a config's sim section), e.g. profile=realistic or "
    "text_flip_rate=0.1 or proposal_mix.cue=0.2 (repeatable). A profile fills the keys not given.",
)


def served_model_name(config: SimConfig) -> str:
    """The default served name with the world's hash: named after the answers it gives
    (:func:`answer_world`), so two servers of one world at other latencies or fault rates share
    a name (and the temperature-0 reuse key), and two worlds never do."""
    world_json = json.dumps(answer_world(config), sort_keys=True, separators=(",", ":"))
    return f"{DEFAULT_SERVED_MODEL}-{hashlib.sha256(world_json.encode()).hexdigest()[:8]}"


def _sim_config(world: tuple[str, ...], reserved: dict[str, str], **keys: float | int) -> SimConfig:
    """``--sim`` items plus the command's own options; a bad key or value is a usage error."""
    from pydantic import ValidationError

    from trm_assets.harness.data.config import ConfigError, parse_set_overrides

    try:
        values = parse_set_overrides(world)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--sim") from None
    for key in sorted(values.keys() & reserved.keys()):
        raise click.BadParameter(f"{key}: use {reserved[key]}", param_hint="--sim")
    try:
        return SimConfig.model_validate({**values, **keys})
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or 'sim'}: {err['msg']}" for err in e.errors()
        )
        raise click.BadParameter(problems, param_hint="--sim") from None


@click.command("sim-serve")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default)."
)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@_data_option("Sample directory (or its ground_truth.json).")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Simulator seed (SimConfig.seed)."
)
@click.option(
    "--model",
    default=DEFAULT_SERVED_MODEL,
    show_default=True,
    help="Model name to report (with --sim: suffixed by a hash of the world, so answers of two "
    "worlds are never reused as one model's).",
)
@click.option("--latency-ms", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--latency-jitter-ms", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--fault-timeout-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option("--fault-5xx-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option("--fault-malformed-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option(
    "--timeout-sleep-s",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="How long a timed-out request hangs.",
)
@click.option(
    "--fault-status",
    "fault_statuses",
    type=click.IntRange(500, 599),
    multiple=True,
    default=(503, 500),
    show_default=True,
    help="HTTP status(es) of injected 5xx faults (repeat the option).",
)
@click.option("--log-requests", is_flag=True, help="Log one line per request to stderr.")
@_WORLD
def serve(
    host: str,
    port: int,
    data_dir: Path,
    seed: int,
    model: str,
    latency_ms: float,
    latency_jitter_ms: float,
    fault_timeout_rate: float,
    fault_5xx_rate: float,
    fault_malformed_rate: float,
    timeout_sleep_s: float,
    fault_statuses: tuple[int, ...],
    log_requests: bool,
    world: tuple[str, ...],
) -> None:
    """Serve the SIMULATED model as an OpenAI-compatible API (/v1/chat/completions, /v1/models)."""
    from trm_assets.llm.sim.provider import SimulatedProvider
    from trm_assets.llm.sim.server import ServeOptions, SimServer, is_loopback
    from trm_assets.llm.sim.world import load_world

    config = _sim_config(
        world,
        _SERVE_KEYS,
        seed=seed,
        latency_ms_mean=latency_ms,
        latency_ms_jitter=latency_jitter_ms,
        fault_timeout_rate=fault_timeout_rate,
        fault_http_5xx_rate=fault_5xx_rate,
        fault_malformed_rate=fault_malformed_rate,
    )
    if world and model == DEFAULT_SERVED_MODEL:  # another world is another model: another name
        model = served_model_name(config)
    truth = load_world(data_dir)
    provider = SimulatedProvider(truth, config, model=model, inject_faults=False)
    server = SimServer(
        provider,
        host,
        port,
        ServeOptions(
            timeout_sleep_s=timeout_sleep_s,
            fault_statuses=tuple(fault_statuses),
            log_requests=log_requests,
        ),
    )
    if not is_loopback(host):
        where = repr(host) if host else "every interface ('')"
        click.echo(
            f"warning: binding {where}: the simulated server is reachable beyond this machine",
            err=True,
        )
    click.echo(
        f"SIMULATED OpenAI-compatible server: model {model!r} "
        f"({len(truth.questions)} questions from {truth.source}) at {server.base_url}"
    )
    click.echo(
        f"  world: profile {config.profile}, temperature {config.agent_temperature:g} when a "
        f"request names none, text flips {config.text_flip_rate:g}, length cost "
        f"{config.length_cost:g}"
    )
    click.echo(
        f"  faults: timeout {fault_timeout_rate:g}, 5xx {fault_5xx_rate:g}, "
        f"malformed {fault_malformed_rate:g}; latency {latency_ms:g}±{latency_jitter_ms:g} ms. "
        "Ctrl-C to stop."
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


@click.command("sim-oracle")
@_data_option()
@click.option(
    "--skills",
    "skills_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("prompts/skills"),
    show_default=True,
)
@click.option(
    "--system-prompt",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Agent system prompt file (optional).",
)
@click.option(
    "--pools",
    "pools_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="pools.json: report per pool.",
)
@click.option("--json", "as_json", is_flag=True)
@_WORLD
def oracle(
    data_dir: Path,
    skills_dir: Path,
    system_prompt: Path | None,
    pools_file: Path | None,
    as_json: bool,
    world: tuple[str, ...],
) -> None:
    """Expected (noise-free) accuracy of a SIMULATED skill set, its optimum, the best possible."""
    from trm_assets.llm.sim.oracle import load_skills, optimal_skills, oracle_table
    from trm_assets.llm.sim.world import load_world

    config = _sim_config(world, {})
    truth = load_world(data_dir)
    skills = load_skills(skills_dir)
    system = system_prompt.read_text(encoding="utf-8") if system_prompt else ""
    pools: dict[str, list[str]] = {"all": sorted(truth.questions)}
    if pools_file is not None:
        pools.update(_read_pools(pools_file))
    report: dict[str, object] = {
        "simulated": True,
        "sim": answer_world(config),
        "data": str(data_dir),
        "skills": str(skills_dir),
        "pools": {},
    }
    for name, qids in pools.items():
        seed_rows = oracle_table(truth, qids, skills, config, system_prompt=system)
        opt_rows = oracle_table(
            truth, qids, optimal_skills(truth, skills), config, system_prompt=system
        )
        report["pools"][name] = [  # type: ignore[index]
            {
                "group": s.group,
                "n": s.n,
                "expected": round(s.expected, 4),
                "optimal": round(o.expected, 4),
                "best": round(s.best, 4),
                "cues": f"{s.cues_expressed}/{s.cues_total}",
            }
            for s, o in zip(seed_rows, opt_rows, strict=True)
        ]
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    click.echo(f"SIMULATED oracle (expected accuracy) for skills {skills_dir} on {data_dir}")
    for name, rows in report["pools"].items():  # type: ignore[attr-defined]
        click.echo(f"\npool {name}")
        click.echo(f"  {'group':<22} {'n':>5} {'skills':>7} {'optimal':>8} {'best':>6} cues")
        for r in rows:
            click.echo(
                f"  {r['group']:<22} {r['n']:>5} {r['expected']:>7.3f} {r['optimal']:>8.3f} "
                f"{r['best']:>6.3f} {r['cues']}"
            )


def _read_pools(path: Path) -> dict[str, list[str]]:
    """Question-id lists of a pools.json (any top-level key whose value is a list of ids)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, not JSON
        raise click.BadParameter(f"{path}: {e}", param_hint="--pools") from None
    found: dict[str, list[str]] = {}
    src = data.get("pools", data) if isinstance(data, dict) else {}
    if isinstance(src, dict):
        for key, value in sorted(src.items()):
            if isinstance(value, list) and all(isinstance(x, str) for x in value):
                found[key] = sorted(value)
    if not found:
        raise click.BadParameter(
            f"{path}: no list of question ids found "
            "(expected e.g. {'test': [...], 'validation': [...]})"
        )
    return found
