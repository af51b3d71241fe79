"""The interface every batching policy implements; engines (simulated or real) drive it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping

from workbench.scheduling.plan import StepPlan, StepResult
from workbench.scheduling.sequence import Sequence


class BatchPolicy(ABC):
    """A clock-agnostic batching policy for one replica.

    The engine calls `add` when a request reaches the replica, `schedule(now)` for the next
    step, and `complete(plan, n_steps)` once the step (or `n_steps` repetitions of it)
    ran. Time only enters through `now`; the policy never reads a clock itself.
    """

    step: int  # steps completed so far on this replica

    @abstractmethod
    def add(self, seq: Sequence, now: float) -> None:
        """Queue a newly arrived request."""

    @abstractmethod
    def schedule(self, now: float) -> StepPlan | None:
        """Plan the next step, or None when there is nothing to run now."""

    @abstractmethod
    def complete(
        self,
        plan: StepPlan,
        n_steps: int = 1,
        stopped: Collection[int] = (),
        extra: Mapping[int, int] | None = None,
    ) -> StepResult:
        """Account for `n_steps` runs of `plan`. `stopped`: request ids that ended early
        (EOS in a real model) at the last step. `extra`: tokens a multi-token decoder emitted
        beyond the step's one, per decoding request id (one step only)."""

    @abstractmethod
    def outstanding(self) -> int:
        """Requests queued or running on this replica."""

    @abstractmethod
    def queued(self) -> int:
        """Requests waiting for admission on this replica (not yet running)."""

    @abstractmethod
    def decode_sequences(self) -> list[Sequence]:
        """The sequences (padding slots included) that decode one token in the next step.

        A real engine needs them one by one; the simulator only uses the plan's counts.
        """

    def next_wakeup_s(self, now: float) -> float | None:
        """When an idle policy wants to be asked again without a new arrival (timers)."""
        return None
