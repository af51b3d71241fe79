"""What the core needs from a backend, loaded on demand: backends fill the core's registries
when imported, and this top-floor module imports them only when a scenario asks."""

from __future__ import annotations

from workbench.errors import WorkbenchError
from workbench.scenario.system import SchedulerConfig
from workbench.scheduling.length_predictors import PREDICTORS, scheduler_predictor


def load_predictor_plugin(scheduler: SchedulerConfig) -> None:
    """Register the real backend's learned length predictor when `scheduler` asks for it."""
    cfg = scheduler_predictor(scheduler)
    if cfg is None or cfg.kind in PREDICTORS:
        return
    try:
        import real_backend.length_predictor.predictor  # noqa: F401  (registers "learned")
    except ImportError as exc:
        raise WorkbenchError(
            f"the learned predictor runs the served model and needs torch ({exc.name} is "
            "missing): pip install -e '.[real]' -c constraints.txt",
            field="predictor",
        ) from None
