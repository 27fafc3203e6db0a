"""The base of every schema a user fills in (scenario, workload, model, GPU, profile).

Three rules on top of pydantic's defaults, each closing a hole through which a wrong value used
to pass silently:

* unknown keys are errors (`extra="forbid"`): a typo never falls back to a default;
* numbers are finite (`allow_inf_nan=False`): `.inf` or `.nan` in a duration, a rate or a profile
  coefficient would run forever, fill memory or break an invariant deep inside the engine;
* a boolean is not a number: pydantic's lax mode reads `true` as 1 (YAML's `yes`, `on` too), so
  `num_requests: true` ran one request. Fields that take a boolean say so in their annotation.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator


def takes_bool(annotation: Any) -> bool:
    """Whether a field annotated `annotation` accepts a boolean as such."""
    if annotation is bool or annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return any(isinstance(arg, bool) for arg in get_args(annotation))
    if origin in (Union, types.UnionType, Annotated):
        return any(takes_bool(arg) for arg in get_args(annotation))
    return False


class Boolean:
    """A boolean given where a number (or anything but a boolean) belongs.

    It stands in for the boolean during validation: no type accepts it, so pydantic reports the
    field's own expectation ("must be an integer"), and its repr is the YAML spelling."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "true" if self.value else "false"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_as_number(cls, data: Any) -> Any:
        # a model-level check: pydantic forbids field validators on discriminator fields
        if not isinstance(data, dict):
            return data
        out = data
        for key, value in data.items():
            field = cls.model_fields.get(key) if isinstance(key, str) else None
            if isinstance(value, bool) and field is not None and not takes_bool(field.annotation):
                out = dict(out) if out is data else out
                out[key] = Boolean(value)
        return out
