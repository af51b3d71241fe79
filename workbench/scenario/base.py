"""The base of every scenario model: strict, described, frozen-free pydantic v2."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, every field carries a description, and no
    number is NaN or infinite (one rule for every float field, however it is bounded)."""

    model_config = ConfigDict(
        extra="forbid", validate_default=True, use_attribute_docstrings=False, allow_inf_nan=False
    )


def _integer_as_its_digits(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


# A stored run's or profile's id (or name) as a scenario names it. YAML reads an id of digits
# only (`calibrate_from: 190660135082`, or the same through `--set`) as an integer; its digits
# are the id. (YAML 1.1 reads digits 0-7 after a leading 0 as octal: quote such an id.)
StoredRef = Annotated[str, BeforeValidator(_integer_as_its_digits)]
