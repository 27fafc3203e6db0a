"""Step-cost profile files: the schema, and reading and writing them.

A profile holds the coefficients of the step cost model (see `sim.costs.cost_model` and
`docs/profiles.md`), the model form they belong to, and where they came from; a `table` profile
also holds tabulated step costs (`sim.costs.tables`) and uses its coefficients outside the tables,
and any profile may carry engine effects to price on top (`pricing`, `sim.costs.knobs`). Every
problem in a file is a ScenarioError naming the key. Files are written atomically; lists of
numbers (table rows) are written one line each.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from sim.costs.expert_terms import ExpertTerms
from sim.costs.knobs import PricingSpec
from sim.costs.tables import AnalyticForm, TableSpec
from sim.errors import ScenarioError
from sim.inputs.messages import as_error, problems
from sim.inputs.strict_model import StrictModel
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import read_text


class _KeyedError(ValueError):
    """A cross-field check failure that knows which key it is about (for ScenarioError paths)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


# Upper bounds of the coefficients: orders of magnitude beyond any GPU, yet small enough that a
# step's time stays finite whatever its token counts (a step of an hour is already absurd).
MAX_STEP_S = 3600.0
MAX_PER_TOKEN_S = 60.0


class Coefficients(StrictModel):
    model_config = ConfigDict(frozen=True)

    # fixed per-step cost: weight reads + launch overhead
    t_mem_s: float = Field(ge=0, le=MAX_STEP_S)
    # per scheduled token (linear layers; split form: per prompt token)
    t_flop_s_per_token: float = Field(ge=0, le=MAX_PER_TOKEN_S)
    # per context token attention reads
    t_kv_s_per_token: float = Field(default=0.0, ge=0, le=MAX_PER_TOKEN_S)
    # per unit of sum(chunk * context)
    t_attn_s_per_token2: float = Field(default=0.0, ge=0, le=MAX_PER_TOKEN_S)
    # two_regime: where the slope changes, and the slope above it
    ridge_tokens: float | None = Field(default=None, gt=0, le=1e12)
    t_flop_high_s_per_token: float | None = Field(default=None, ge=0, le=MAX_PER_TOKEN_S)
    # split form: per decode token (every token that is not a prompt token), per sequence, and
    # per query-key pair of causal prompt attention: sum(chunk * (prefix + chunk / 2))
    t_decode_s_per_token: float | None = Field(default=None, ge=0, le=MAX_PER_TOKEN_S)
    t_seq_s_per_seq: float = Field(default=0.0, ge=0, le=MAX_PER_TOKEN_S)
    t_attn_s_per_pair: float = Field(default=0.0, ge=0, le=MAX_PER_TOKEN_S)

    @model_serializer(mode="wrap")
    def _leave_out_unused_split_terms(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):  # profiles without the split terms read as they always did
            for key, unused in _SPLIT_DEFAULTS.items():
                if key in data and data[key] == unused:
                    del data[key]
        return data


_SPLIT_DEFAULTS: dict[str, Any] = {
    "t_decode_s_per_token": None,
    "t_seq_s_per_seq": 0.0,
    "t_attn_s_per_pair": 0.0,
}


def check_form(form: str, c: Coefficients) -> None:
    """The coefficients a model form uses must be given, the others left at zero."""
    two = form == "two_regime"
    for key in ("ridge_tokens", "t_flop_high_s_per_token"):
        if (getattr(c, key) is None) == two:
            need = "required" if two else "only allowed"
            raise _KeyedError(f"coefficients.{key}", f"{need} when model_form is two_regime")
    if form == "seed":
        for key in ("t_kv_s_per_token", "t_attn_s_per_token2"):
            if getattr(c, key) != 0:
                raise _KeyedError(f"coefficients.{key}", "must be 0 in the seed model form")
    if form != "split":
        for key, unused in _SPLIT_DEFAULTS.items():
            if getattr(c, key) != unused:
                raise _KeyedError(f"coefficients.{key}", "only allowed in the split model form")
    elif c.t_decode_s_per_token is None:
        raise _KeyedError("coefficients.t_decode_s_per_token", "required in the split model form")
    check_positive(form, c)


def check_positive(form: str, c: Coefficients) -> None:
    """Every step the coefficients price takes time: a step computes at least one token (a
    prompt or a decode token) of at least one sequence, so the fixed terms or the per-token
    slopes of both kinds of token must be > 0. A step of no time would never let the clock
    move."""
    if c.t_mem_s > 0:
        return
    if form == "split":
        both = c.t_flop_s_per_token > 0 and (c.t_decode_s_per_token or 0) > 0
        if c.t_seq_s_per_seq > 0 or both:
            return
        reason = (
            "t_mem_s, t_seq_s_per_seq, or both t_flop_s_per_token and t_decode_s_per_token must "
            "be > 0 (else a step takes no time)"
        )
    elif c.t_flop_s_per_token > 0:  # two_regime: up to the ridge (> 0) at this slope
        return
    else:
        reason = "t_mem_s or t_flop_s_per_token must be > 0 (else a step takes no time)"
    raise _KeyedError("coefficients", reason)


class FitSummary(StrictModel):
    """How well a measured profile fits its data; calibration may add more keys."""

    model_config = ConfigDict(extra="allow", frozen=True)

    r2: float
    max_rel_error: float
    num_points: int = Field(gt=0)
    heldout_max_rel_error: float | None = None


class Profile(StrictModel):
    model_config = ConfigDict(frozen=True)

    schema_version: Literal[1]
    name: str
    source: Literal["measured", "roofline", "imported", "inline"]
    model_form: Literal["seed", "extended", "two_regime", "split", "table"]
    # the analytic form's coefficients; with a table, they price the steps outside it
    coefficients: Coefficients
    provenance: dict[str, Any] = Field(default_factory=dict)
    fit: FitSummary | None = None
    table: TableSpec | None = None  # model_form table: the tabulated parts (sim/costs/tables.py)
    pricing: PricingSpec | None = None  # engine effects priced on top (sim/costs/pricing.py)
    # a mixture of experts' routed layers and data-parallel ranks (sim/costs/expert_terms.py)
    experts: ExpertTerms | None = None

    @property
    def analytic_form(self) -> AnalyticForm:
        """The form of `coefficients`: the model form, or a table's fallback form."""
        if self.table is not None:
            return self.table.fallback_form
        assert self.model_form != "table"
        return self.model_form

    @model_validator(mode="after")
    def _check_form(self) -> Profile:
        if (self.table is None) == (self.model_form == "table"):
            need = "required" if self.table is None else "only allowed"
            raise _KeyedError("table", f"{need} when model_form is table")
        check_form(self.analytic_form, self.coefficients)
        if self.experts is not None and self.model_form not in ("extended", "two_regime"):
            raise _KeyedError("experts", "only allowed when model_form is extended or two_regime")
        return self

    @model_serializer(mode="wrap")
    def _leave_out_absent_blocks(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):  # analytic profiles read as they always did
            for key in ("table", "pricing", "experts"):
                if key in data and data[key] is None:
                    del data[key]
        return data


def _scenario_error(exc: ValidationError, file: str | None, prefix: str | None) -> ScenarioError:
    """Every schema problem, one line, with dotted key paths (under `prefix` when inline)."""
    found = [
        (".".join(p for p in (prefix, path) if p), reason)
        for path, reason in problems(exc, Profile)
    ]
    return as_error(found, file)


class _Dumper(yaml.SafeDumper):
    """Lists of numbers in flow style, one line each (a table row), everything else as before."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flat = bool(data) and all(isinstance(v, (int, float)) or v is None for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def load_profile(path: Path) -> Profile:
    """Read and validate a profile file; every problem is a ScenarioError naming the key. The
    file is read strictly (`sim.inputs.strict_yaml`); a file read before and unchanged since is
    not parsed again (a table profile holds thousands of numbers, and sweeps load it often)."""
    try:
        stat = path.stat()
    except OSError:
        stat = None
    if stat is None:
        return _load_profile(path, 0, -1)
    return _load_profile(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _load_profile(path: Path, mtime_ns: int, size: int) -> Profile:
    data = load_yaml(read_text(path, "profile file"), str(path))
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping at the top level", file=str(path))
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise _scenario_error(exc, str(path), None) from None


def save_profile(profile: Profile, path: Path) -> None:
    """Write `profile` atomically: a temporary file in the same folder, then os.replace."""
    text = yaml.dump(profile.model_dump(mode="json"), Dumper=_Dumper, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        # mkstemp creates the file private (0600); a profile is meant to be shared
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
