"""The loop's observer seam (issue 14): benchmarks, progress displays and the simulator's oracle
watch the loop through these callbacks instead of patching module globals (GEPA's
``core/callbacks.py`` shape).

Contract: observers are notified synchronously, in registration order, after the event happened;
they must not mutate what they are given, and an exception in an observer propagates (a
benchmark's bug is not data). Every method has a no-op default in :class:`LoopObserver`, so an
observer implements only what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trm_assets.harness.loop.gate import GateRequest, ValidationOutcome
    from trm_assets.harness.loop.plan import Action
    from trm_assets.harness.loop.rollouts import InferenceProgress, InferenceResult


class LoopObserver:
    """Base class with no-op callbacks."""

    def on_gate(self, req: GateRequest, outcome: ValidationOutcome) -> None:
        """A candidate was validated (any policy, any verdict, NO_LADDER included)."""

    def on_unit_done(self, action: Action) -> None:
        """A unit of work (init, a step, one slow-update function, finalize) checkpointed."""

    def on_rollouts(self, progress: InferenceProgress) -> None:
        """Progress inside a rollout barrier (rollouts done / total, calls, tokens)."""

    def on_barrier(self, result: InferenceResult) -> None:
        """A rollout barrier (one ``run_inference`` call of the loop) ended."""
