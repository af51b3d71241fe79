"""What the core needs from a backend, loaded on demand: backends fill the core's registries
when imported, and this module imports them only when a scenario asks (the simulator calls
it before it makes predictions; the real backend registers its own on import)."""

from __future__ import annotations

from workbench.errors import needs_real_extra
from workbench.scenario.system import SchedulerConfig
from workbench.scheduling.length_predictors import (
    PREDICTORS,
    predictor_field,
    scheduler_predictor,
)


def load_predictor_plugin(scheduler: SchedulerConfig) -> None:
    """Register the real backend's learned length predictor when `scheduler` asks for it."""
    cfg = scheduler_predictor(scheduler)
    if cfg is None or cfg.kind in PREDICTORS:
        return
    what = "the learned predictor runs the served model"
    with needs_real_extra(what, field=predictor_field(scheduler)):
        import real_backend.length_predictor.predictor  # noqa: F401  (registers "learned")
