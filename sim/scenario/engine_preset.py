"""Engine presets: engine terms fitted to measured runs, named by a scenario (`engine.preset`).

A preset file (`batchsim calibrate-engine` writes them) holds an `engine:` mapping, the same
fields a scenario's `engine:` takes (`frontend_s`, `pricing`: CPU overhead, GPU-time scale,
CUDA-graph sizes), and its provenance: the measured runs it was fitted to, the engine version,
the GPU, the model, the profile it was fitted on top of, and the errors before and after.

A scenario names one by name (a file shipped in `sim/scenario/presets/`, e.g.
`vllm-0.11_h100-sxm`) or by path (relative to the scenario file). The preset's fields come
first and the scenario's own `engine:` fields win over them, key by key (`pricing` and
`cpu_overhead` merge too), so a scenario can pin one term and keep the others.

The terms are fitted on top of one step-cost profile: a GPU-time scale means "this much faster
or slower than that profile". The preset names that profile (`provenance.setup.profile`), and
the preset splits in two: its engine terms (host time per step and per sequence, front end,
CUDA-graph sizes), which transfer across models on that engine and GPU class, and its kernel
correction (`pricing.gpu_time_scale`), which belongs to the profile it was fitted on. On another
profile only the engine terms apply (`engine.preset_scope: engine terms only`, recorded in the
resolved scenario); on the `roofline` and `events` profiles, which price host time per step
themselves, the preset's host time is left out as well (`front end and graph sizes only`). A
scenario that states its own `gpu_time_scale` keeps the whole preset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.errors import ScenarioError
from sim.inputs.messages import as_error, problems
from sim.inputs.strict_yaml import load_yaml
from sim.inputs.text import check_regular_file, read_text
from sim.scenario.schema import EngineSpec

PRESETS_DIR = Path(__file__).parent / "presets"
# engine fields batchsim sets from a preset and records in the resolved scenario; a scenario or
# a preset that sets them is refused (a scenario's own would be ignored, or unscope the preset)
BATCHSIM_KEYS = ("preset_profile", "preset_scope")


def shipped_presets() -> list[str]:
    """Names of the presets that come with batchsim."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_path(name: str, base_dir: Path) -> Path:
    """The file a preset name or path means."""
    if name in shipped_presets():
        return PRESETS_DIR / f"{name}.yaml"
    candidate = Path(name).expanduser()
    if candidate.suffix.lower() not in (".yaml", ".yml"):
        raise ScenarioError(
            f"no engine preset {name!r}; shipped: {', '.join(shipped_presets()) or 'none'} "
            "(or give a .yaml file)",
            path="engine.preset",
        )
    return candidate if candidate.is_absolute() else base_dir / candidate


def read_preset(path: Path) -> dict[str, Any]:
    """The `engine:` mapping of a preset file, checked against the scenario's engine schema (so
    that a bad value is blamed on the preset, not on the scenario that names it), with the
    profile its kernel correction was fitted on as `preset_profile` (when it names one)."""
    check_regular_file(path, "engine preset")
    file = str(path)
    doc = load_yaml(read_text(path, "engine preset"), file)
    if not isinstance(doc, dict) or doc.get("kind") != "engine_preset":
        raise ScenarioError("not an engine preset (kind: engine_preset)", file=file, path="kind")
    engine = doc.get("engine")
    if not isinstance(engine, dict):
        raise ScenarioError("must be a mapping of engine fields", file=file, path="engine")
    if "preset" in engine:
        raise ScenarioError("a preset cannot name another preset", file=file, path="engine.preset")
    for key in BATCHSIM_KEYS:
        if key in engine:
            raise ScenarioError("set by batchsim, not by a preset", file=file, path=f"engine.{key}")
    try:
        EngineSpec.model_validate(engine)
    except ValidationError as exc:
        found = problems(exc, EngineSpec)
        raise as_error([(f"engine.{key}".rstrip("."), why) for key, why in found], file) from None
    provenance = doc.get("provenance")
    setup = provenance.get("setup") if isinstance(provenance, dict) else None
    fitted_on = setup.get("profile") if isinstance(setup, dict) else None
    if isinstance(fitted_on, str) and fitted_on:
        engine = {**engine, "preset_profile": fitted_on[:200]}
    return engine


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_engine_preset(raw: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """`raw` (a scenario mapping) with its `engine.preset` expanded: the preset's fields under
    the scenario's own. The preset's name stays in `engine.preset`, so the resolved scenario
    says where its terms came from."""
    engine = raw.get("engine")
    if not isinstance(engine, dict):
        return raw
    for key in BATCHSIM_KEYS:
        if engine.get(key) is not None:
            raise ScenarioError(
                "set by batchsim from the engine preset (it says which profile the preset was "
                "fitted on and how much of it applies); a scenario does not set it",
                path=f"engine.{key}",
            )
    if engine.get("preset") is None:
        return raw
    name = engine["preset"]
    if not isinstance(name, str) or not name:
        raise ScenarioError("must be a preset name or a .yaml path", path="engine.preset")
    preset = read_preset(preset_path(name, base_dir))
    own = {k: v for k, v in engine.items() if k != "preset"}
    pricing = own.get("pricing")
    if isinstance(pricing, dict) and "gpu_time_scale" in pricing:
        preset.pop("preset_profile", None)  # the scenario's own scale: nothing to scope
    return {**raw, "engine": {**_merge(preset, own), "preset": name}}


def scope_preset(engine: EngineSpec, profile_name: str, prices_host: bool) -> EngineSpec:
    """`engine` with its preset's kernel correction kept on the profile it was fitted on, and
    dropped on any other; on a profile that prices host time itself (`roofline`, `events`: its
    per-step host term), the preset's host time is dropped too, so that it is not counted twice
    (`preset_scope` says which)."""
    fitted_on = engine.preset_profile
    if fitted_on is None:
        return engine
    if fitted_on == profile_name:
        return engine.model_copy(update={"preset_scope": "all"})
    pricing = engine.pricing
    dropped = ("gpu_time_scale", "cpu_overhead") if prices_host else ("gpu_time_scale",)
    if pricing is not None:
        given = {k: v for k, v in pricing.model_dump(exclude_unset=True).items()
                 if k not in dropped}  # fmt: skip
        pricing = type(pricing).model_validate(given)
    scope = "front end and graph sizes only" if prices_host else "engine terms only"
    return engine.model_copy(update={"pricing": pricing, "preset_scope": scope})
