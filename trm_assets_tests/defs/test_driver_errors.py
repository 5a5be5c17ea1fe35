"""The driver's error line names the op's own exception, and a broken dagster.yaml is a message
(review of bad inputs: the cause was only in Dagster's stack trace; a YAML ParserError escaped)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster_shared.error import SerializableErrorInfo

from trm_assets.defs.driver import _root_message, ensure_dagster_home
from trm_assets.domain.errors import TrmError


def _info(message: str, cause: SerializableErrorInfo | None = None) -> SerializableErrorInfo:
    return SerializableErrorInfo(message=message, stack=[], cls_name=None, cause=cause)


def test_the_root_cause_is_named_without_our_class_path() -> None:
    root = _info(
        "trm_assets.harness.storage.integrity.IntegrityError: store/skills/v4/a.md: hash "
        "mismatch; restore the file\n"
    )
    wrapped = _info(
        'dagster._core.errors.DagsterExecutionStepExecutionError: Error in op "x":\n', root
    )
    assert _root_message(wrapped) == "store/skills/v4/a.md: hash mismatch; restore the file"
    other = _info("ValueError: something else\n")
    assert _root_message(_info("wrapper\n", other)) == "ValueError: something else"
    assert _root_message(None) == ""


@pytest.mark.parametrize("text", ["run_coordinator: [\n", "no_such_key: 1\n"])
def test_a_broken_dagster_yaml_is_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    (tmp_path / "dagster.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with pytest.raises(TrmError, match=r"dagster\.yaml \(DAGSTER_HOME\): not a valid Dagster"):
        ensure_dagster_home()


def test_an_interrupted_run_is_told_from_a_failed_one() -> None:
    """Ctrl-C during a unit said "run … failed: DagsterExecutionInterruptedError … fix the
    cause"; an interrupt is now its own outcome (exit 130, "resume continues")."""
    from types import SimpleNamespace

    from trm_assets.defs.driver import _interrupted

    def result(*errors: SerializableErrorInfo) -> object:
        events = [
            SimpleNamespace(
                event_type_value="STEP_FAILURE",
                step_failure_data=SimpleNamespace(error=e, user_failure_data=None),
            )
            for e in errors
        ]
        return SimpleNamespace(all_events=[SimpleNamespace(event_type_value="STEP_START"), *events])

    interrupt = SerializableErrorInfo(
        message="dagster._core.errors.DagsterExecutionInterruptedError\n",
        stack=[],
        cls_name="DagsterExecutionInterruptedError",
    )
    assert _interrupted(result(_info("wrapper\n", interrupt)))  # type: ignore[arg-type]
    duckdb_ctrl_c = SerializableErrorInfo(
        message="RuntimeError: Query interrupted\n", stack=[], cls_name="RuntimeError"
    )
    assert _interrupted(result(_info("wrapper\n", duckdb_ctrl_c)))  # type: ignore[arg-type]
    assert not _interrupted(result(_info("trm_assets.x.IntegrityError: bad\n")))  # type: ignore[arg-type]
    assert not _interrupted(result())  # type: ignore[arg-type]


def test_an_interrupt_outside_an_op_is_an_interrupt() -> None:
    """A Ctrl-C while a run initialised its resources failed the run without a step failure:
    `trm train` said "run … failed … fix the cause" and exited 2 instead of 130 (hostile
    review). Real executions: the interrupt in a resource, in an op, and a plain failure."""
    import dagster as dg

    from trm_assets.defs.driver import _interrupted

    @dg.resource
    def interrupted_setup(_: object) -> None:
        raise KeyboardInterrupt

    @dg.op(required_resource_keys={"r"})
    def uses_it() -> None:
        pass

    @dg.op
    def interrupted_op() -> None:
        raise KeyboardInterrupt

    @dg.op
    def failing_op() -> None:
        raise ValueError("a bug, not an interrupt")

    in_setup = dg.GraphDefinition("g1", node_defs=[uses_it]).to_job(
        resource_defs={"r": interrupted_setup}
    )
    runs = {
        "resource": in_setup,
        "op": dg.GraphDefinition("g2", node_defs=[interrupted_op]).to_job(),
        "failure": dg.GraphDefinition("g3", node_defs=[failing_op]).to_job(),
    }
    results = {k: job.execute_in_process(raise_on_error=False) for k, job in runs.items()}
    steps = {k: [e.event_type_value for e in r.all_events] for k, r in results.items()}
    assert "STEP_START" not in steps["resource"]  # the case: no step failed
    assert {k: (r.success, _interrupted(r)) for k, r in results.items()} == {
        "resource": (False, True),
        "op": (False, True),
        "failure": (False, False),
    }
