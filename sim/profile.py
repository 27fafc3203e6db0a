"""Step-cost profile files: schema, load/save, and roofline profiles computed from datasheets.

A profile holds the coefficients of the step cost model (see `sim.cost_model` and DESIGN.md "Step
cost model"), the model form they belong to, and where they came from. Measured profiles are
written by `calibration/`; roofline profiles are computed here from the model size and the GPU's
datasheet bandwidth and FLOP/s, so every scenario runs without a GPU (formulas in
`roofline_profile` and in each file's provenance).

The attention term prices `sum(chunk * context)` (QK^T and PV, 2 FLOPs per multiply-add each). For
a whole prompt this counts the causally masked half too; the flop efficiency, chosen against real
A100 step times (`calibration/check_roofline.py`), absorbs that along with kernel inefficiency.

`python -m sim.profile roofline calibration/profiles/roofline` regenerates the committed roofline
files. They carry no date, so regenerating them gives identical bytes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.catalog import HARDWARE, MODELS, HardwareSpec, ModelSpec, kv_capacity_tokens
from sim.errors import ScenarioError

# Chosen against the A100 reference timings; the justification travels in each file's provenance.
ROOFLINE_MEM_EFFICIENCY = 0.8
ROOFLINE_FLOP_EFFICIENCY = 0.7
_EFFICIENCY_NOTE = (
    "Achieved fractions of datasheet HBM bandwidth and dense bf16 FLOP/s, chosen against 61 real "
    "A100-80GB SXM step times of Llama-2-7B and Llama-3-8B (Vidur kernel timings; "
    "calibration/check_roofline.py). Memory 0.8: weight streaming at batch 1 reaches about 70% "
    "of peak and long-context KV reads about 90%; one factor covers both. FLOP 0.7: large bf16 "
    "GEMMs reach 70-80% of tensor-core peak on A100. Roofline/measured with these: decode median "
    "0.97 (0.87-1.26), prefill median 1.11 (0.87-1.41); the worst cases are short prefills and "
    "large decode batches, where adding the memory and compute terms (no overlap) overestimates."
)


class _KeyedError(ValueError):
    """A cross-field check failure that knows which key it is about (for ScenarioError paths)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


class Coefficients(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    t_mem_s: float = Field(ge=0)  # fixed per-step cost: weight reads + launch overhead
    t_flop_s_per_token: float = Field(ge=0)  # per scheduled token (linear layers)
    t_kv_s_per_token: float = Field(default=0.0, ge=0)  # per context token attention reads
    t_attn_s_per_token2: float = Field(default=0.0, ge=0)  # per unit of sum(chunk * context)
    ridge_tokens: float | None = Field(default=None, gt=0)  # two_regime: where the slope changes
    t_flop_high_s_per_token: float | None = Field(default=None, ge=0)  # slope above the ridge


class FitSummary(BaseModel):
    """How well a measured profile fits its data; calibration may add more keys."""

    model_config = ConfigDict(extra="allow", frozen=True)

    r2: float
    max_rel_error: float
    num_points: int = Field(gt=0)
    heldout_max_rel_error: float | None = None


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    name: str
    source: Literal["measured", "roofline", "imported", "inline"]
    model_form: Literal["seed", "extended", "two_regime"]
    coefficients: Coefficients
    provenance: dict[str, Any] = Field(default_factory=dict)
    fit: FitSummary | None = None

    @model_validator(mode="after")
    def _check_form(self) -> Profile:
        c = self.coefficients
        two = self.model_form == "two_regime"
        for key in ("ridge_tokens", "t_flop_high_s_per_token"):
            if (getattr(c, key) is None) == two:
                need = "required" if two else "only allowed"
                raise _KeyedError(f"coefficients.{key}", f"{need} when model_form is two_regime")
        if self.model_form == "seed":
            for key in ("t_kv_s_per_token", "t_attn_s_per_token2"):
                if getattr(c, key) != 0:
                    raise _KeyedError(f"coefficients.{key}", "must be 0 in the seed model form")
        return self


def _scenario_error(exc: ValidationError, file: str | None, prefix: str | None) -> ScenarioError:
    """The first schema error as a ScenarioError with its dotted key path."""
    err = exc.errors()[0]
    parts = [prefix] if prefix else []
    parts += [str(p) for p in err["loc"]]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, _KeyedError):  # a cross-field check: the key is in the exception
        parts.append(cause.key)
    reason = str(cause) if cause is not None else err["msg"]
    return ScenarioError(reason, file=file, path=".".join(parts) or None)


def load_profile(path: Path) -> Profile:
    """Read and validate a profile file; every problem is a ScenarioError naming the key."""
    if not path.is_file():
        raise ScenarioError("profile file not found", file=str(path))
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"invalid YAML: {exc}", file=str(path)) from exc
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping at the top level", file=str(path))
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise _scenario_error(exc, str(path), None) from exc


def save_profile(profile: Profile, path: Path) -> None:
    """Write `profile` atomically: a temporary file in the same folder, then os.replace."""
    text = yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def roofline_profile(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    mem_efficiency: float = ROOFLINE_MEM_EFFICIENCY,
    flop_efficiency: float = ROOFLINE_FLOP_EFFICIENCY,
) -> Profile:
    """The extended-form profile implied by datasheet bandwidth, FLOP/s and model size."""
    bandwidth = hw.hbm_bandwidth_bytes_per_s * mem_efficiency
    flops = hw.peak_flops * flop_efficiency
    attn_flops_per_pair = 4 * model.num_layers * model.num_attention_heads * model.head_dim
    coefficients = Coefficients(
        t_mem_s=model.weight_bytes / bandwidth,
        t_flop_s_per_token=model.flops_per_token / flops,
        t_kv_s_per_token=model.kv_bytes_per_token / bandwidth,
        t_attn_s_per_token2=attn_flops_per_pair / flops,
    )
    dtype = {2.0: "bf16", 1.0: "fp8", 4.0: "fp32"}.get(model.dtype_bytes, "unknown")
    provenance: dict[str, Any] = {
        "generator": "python -m sim.profile roofline (batchsim sim/profile.py)",
        "device": hw.model_dump(exclude={"gpu_memory_utilization", "activation_reserve_bytes"})
        | {"source": "vendor datasheet (HBM bandwidth, dense bf16 tensor-core FLOP/s)"},
        "model": model.model_dump(),
        "dtype": dtype,
        "efficiency": {
            "mem": mem_efficiency,
            "flop": flop_efficiency,
            "justification": _EFFICIENCY_NOTE,
        },
        "formulas": {
            "t_mem_s": "weight_bytes / (hbm_bandwidth * mem)",
            "t_flop_s_per_token": "2 * num_parameters / (peak_flops * flop)",
            "t_kv_s_per_token": "kv_bytes_per_token / (hbm_bandwidth * mem)",
            "t_attn_s_per_token2": "4 * layers * heads * head_dim / (peak_flops * flop)",
        },
        "date": None,  # deliberately absent: regenerating must give identical bytes
    }
    return Profile(
        schema_version=1,
        name=f"roofline-{model.name}-{hw.name}",
        source="roofline",
        model_form="extended",
        coefficients=coefficients,
        provenance=provenance,
    )


def resolve_profile(
    raw: str | dict[str, Any],
    model: ModelSpec,
    hw: HardwareSpec,
    base_dir: Path,
    *,
    key: str | None = None,
) -> Profile:
    """A scenario's `profile`: "roofline", a YAML path (relative to base_dir) or an inline mapping.

    Inline needs only `coefficients` (source `inline`; form `two_regime` when a ridge is given,
    else `extended`); `key` prefixes its error paths."""
    if raw == "roofline":
        return roofline_profile(model, hw)
    if isinstance(raw, str):
        path = Path(raw)
        return load_profile(path if path.is_absolute() else base_dir / path)
    if not isinstance(raw, dict):
        raise ScenarioError("expected 'roofline', a file path or a mapping", path=key)
    coefficients = raw.get("coefficients")
    two = isinstance(coefficients, dict) and coefficients.get("ridge_tokens") is not None
    data = {
        "schema_version": 1,
        "name": "inline",
        "source": "inline",
        "model_form": "two_regime" if two else "extended",
    } | raw
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise _scenario_error(exc, None, key) from exc


def write_roofline_profiles(out_dir: Path) -> list[Path]:
    """One `<model>_<hardware>.yaml` per catalog pair whose weights fit on one GPU."""
    written = []
    for model in MODELS.values():
        for hw in HARDWARE.values():
            if kv_capacity_tokens(model, hw) <= 0:
                continue  # no tensor parallelism: a model that does not fit gets no profile
            path = out_dir / f"{model.name}_{hw.name}.yaml"
            save_profile(roofline_profile(model, hw), path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.profile", description="Generate step-cost profiles."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    roof = sub.add_parser("roofline", help="write roofline profiles for every catalog pair")
    roof.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    for path in write_roofline_profiles(args.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
