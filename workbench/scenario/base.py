"""The base of every scenario model: strict, described, frozen-free pydantic v2."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, every field carries a description, and no
    number is NaN or infinite (one rule for every float field, however it is bounded)."""

    model_config = ConfigDict(
        extra="forbid", validate_default=True, use_attribute_docstrings=False, allow_inf_nan=False
    )
