"""The base of every scenario model: strict, described, frozen-free pydantic v2."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict

# Seeds are stored in a BIGINT column (`runs.seed`); a larger one could not be written.
MAX_SEED = 2**63 - 1


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


# A stored run's or profile's id, prefix or name as a scenario names it. YAML reads one of
# digits only (`calibrate_from: 190660135082`, or the same through `--set`) as an integer;
# its digits are the id. A leading 0 (octal `0123`, binary `0b1`) is lost to YAML before this
# sees it: such an id or prefix, possible only in runs stored before ids began with a letter
# (`workbench.store.ids`), must be quoted.
StoredRef = Annotated[str, BeforeValidator(_integer_as_its_digits)]
