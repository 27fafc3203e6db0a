"""`batchsim calibrate-engine --points FILE... --scenario S --out preset.yaml`: engine terms from
closed-loop benchmark points (`sim.whatif.calibrate_points`), written as an engine preset with the
fit's error, its cross-validated error and the error of a re-simulation at the fitted terms, and
a per-point table in a batchsim folder beside the preset (`<preset stem>.points/points.csv`,
marked as batchsim's: a folder of that name that batchsim did not write is never used)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError

POINTS_KIND = "points"  # the marker's kind of the folder beside the preset
POINTS_TABLE = "points.csv"


def _base(args: argparse.Namespace, options: Any, first: Any) -> tuple[dict[str, Any], dict]:
    """The scenario mapping every point runs through (catalog model and GPU from the flags, the
    engine's limits from `--vllm-log`), resolved once, and the setup the preset records."""
    from sim.measured import read_vllm_log
    from sim.scenario.load import read_scenario
    from sim.whatif.calibrate_points import point_raw
    from sim.whatif.replay import load_replay, replay_raw

    base = read_scenario(args.scenario)
    engine = read_vllm_log(Path(options.vllm_log)) if options.vllm_log is not None else None
    raw, notes = replay_raw(
        base, args.points[0], engine=engine, model=options.model, hardware=options.hardware,
        log_file=options.vllm_log or "",
    )  # fmt: skip
    raw = {**point_raw(raw, first, {}), **({"variants": raw["variants"]} if "variants" in raw
                                             else {})}
    scenario = load_replay(raw, str(args.scenario), args.scenario.resolve().parent,
                           args.overrides)
    if len(scenario.variants) > 1:
        raise ScenarioError(f"has {len(scenario.variants)} variants; closed-loop points fit one "
                            "(drop `variants:` or name one with --set)", file=str(args.scenario))
    return resolved(scenario, notes)


def resolved(scenario: Any, notes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenario's first variant as a mapping (preset and defaults resolved), and the setup
    a preset records of it."""
    from sim.scenario.engine_preset import BATCHSIM_KEYS

    spec = scenario.variants[0].spec
    dumped = json.loads(spec.model_dump_json())
    setup = {
        "model": spec.model.name,
        "hardware": spec.hardware.name,
        "tensor_parallel": spec.hardware.tensor_parallel,
        "profile": scenario.variants[0].profile.name,
        "policy": spec.policy.name,
        "engine_log": notes,
    }
    # what batchsim set from the engine preset goes: the preset, still named, sets it again
    # when each point's scenario is loaded
    for key in BATCHSIM_KEYS:
        dumped["engine"].pop(key, None)
    return {k: v for k, v in dumped.items() if k != "variants"}, setup


def calibrate_points(args: argparse.Namespace, options: Any, terms: tuple[str, ...]) -> int:
    import yaml

    from sim.io.workload_export import write_atomically
    from sim.measured.points import read_points
    from sim.whatif.calibrate_engine import file_digest
    from sim.whatif.calibrate_points import (
        check_terms,
        fit_points,
        points_preset_document,
        points_table,
    )

    for flag, value in (("runs", args.runs), ("--holdout", args.holdout),
                        ("--fit-window", args.fit_window), ("--format", options.format),
                        ("--benchmark", options.benchmark)):
        if value:
            raise ScenarioError("applies to measured runs, not to --points (each point is "
                                "cross-validated instead)", path=flag)
    if options.prefix_tokens:
        raise ScenarioError("applies to measured runs, not to --points", path="--prefix-tokens")
    check_preset_out(args.out)
    folder = check_points_folder(args.out)
    points = read_points(list(args.points))
    base, setup = _base(args, options, points[0])
    check_models(points, setup["model"])
    check_terms(terms, base)
    progress = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    fit = fit_points(base, points, terms, progress=progress)
    files = [{"file": p.name, "sha256": file_digest(p),
              "points": sum(1 for q in points if q.label.startswith(p.name))}
             for p in args.points]  # fmt: skip
    engine = fit.engine_fields(preset_base(base))
    name = args.name or args.out.stem
    doc = points_preset_document(fit, name=name, engine=engine, files=files, setup=setup)
    table = write_points_table(folder, points_table(fit).to_csv(index=False))
    write_atomically(args.out, yaml.safe_dump(doc, sort_keys=False, default_flow_style=None,
                                              width=96))
    if not args.quiet:
        _print(fit, doc)
        print(f"\npreset written to {args.out} (name it in a scenario: engine: {{preset: "
              f"{args.out}}}); per-point errors in {table}")
    return 0


def _print(fit: Any, doc: dict[str, Any]) -> None:
    terms = ", ".join(f"{k} = {v:g}" for k, v in fit.terms.items())
    stats = doc["provenance"]["fit"]
    print(f"fitted on {stats['points']} points in {stats['sweeps']} sweeps: {terms}")
    print("median / worst |error| %      throughput      mean TPOT       mean TTFT")
    for title, key in (("before (neutral terms)", "errors_before"), ("fit", "errors_fit"),
                       (fit.cv_method, "errors_cross_validated"),
                       ("re-simulated at the fit", "errors_simulated_at_fit")):
        cells = []
        for metric in ("tput_err", "tpot_err", "ttft_err"):
            e = stats[key][metric]
            cells.append("n/a" if e["median_abs_pct"] is None
                         else f"{e['median_abs_pct']:5.1f} / {e['worst_abs_pct']:5.1f}")
        print(f"{title:28s} " + "   ".join(f"{c:13s}" for c in cells))


def check_preset_out(out: Path) -> None:
    """The preset file may be written: a .yaml name in an existing folder, new or a preset."""
    if out.suffix.lower() not in (".yaml", ".yml"):
        raise ScenarioError("the preset file must end in .yaml", path="--out")
    if out.is_dir() or (out.exists() and not out.is_file()):
        raise ScenarioError("is not a file; give the preset's file name", file=str(out))
    if out.exists() and not _is_preset(out):
        raise ScenarioError(
            "exists and is not an engine preset batchsim wrote: not replaced", file=str(out)
        )
    if not out.parent.is_dir():
        raise ScenarioError("its folder does not exist", file=str(out))


def file_model(named: str) -> str | None:
    """The catalog model a points file's model names (`name (path)` as InferenceX writes it, a
    path or a served name), or None when it names none the catalog has."""
    from sim.whatif.replay import catalog_model

    outside, _, inside = named.partition(" (")
    for candidate in (named, outside, inside.rstrip(")")):
        if candidate.strip() and (found := catalog_model(candidate.strip())) is not None:
            return found
    return None


def check_models(points: Any, model: str) -> None:
    """Every point was measured on the scenario's model, where the file says which (a point of
    a model outside the catalog, or of a scenario's own model, cannot be told apart)."""
    from sim.costs.catalog import MODELS

    if model not in MODELS:
        return
    for point in points:
        found = file_model(point.model) if point.model else None
        if found is not None and found != model:
            raise ScenarioError(
                f"{point.label}: measured on {point.model!r} ({found} in the catalog), but the "
                f"scenario runs {model}: give the scenario of that model, or --model {found}",
                path="--points",
            )


def check_points_folder(out: Path) -> Path:
    """The folder the per-point table goes to (`<preset stem>.points/` beside the preset): absent,
    empty, or a points folder batchsim wrote (its marker says so), checked before any fit."""
    from sim.io.destination import check_sweep_folder

    folder = out.with_name(out.stem + ".points")
    check_sweep_folder(folder, POINTS_KIND)
    table = folder / POINTS_TABLE
    if os.path.lexists(table) and (table.is_symlink() or not table.is_file()):
        raise ScenarioError("exists and is not a file; batchsim will not replace it",
                            file=str(table))
    return folder


def write_points_table(folder: Path, text: str) -> Path:
    """Write the per-point table into its folder (created and marked as batchsim's)."""
    from sim.io.destination import mark_sweep_folder
    from sim.io.workload_export import write_atomically

    folder.mkdir(exist_ok=True)
    mark_sweep_folder(folder, POINTS_KIND)
    table = folder / POINTS_TABLE
    write_atomically(table, text)
    return table


def _is_preset(path: Path) -> bool:
    """Whether the file at `path` is an engine preset (its first two lines say so)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(200).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.startswith("schema_version: 1\nkind: engine_preset\n")


def preset_base(raw: dict[str, Any]) -> dict[str, Any]:
    """What a preset carries besides the fitted terms: the CUDA-graph sizes the fit ran with
    (`vllm` when they are vLLM's default list)."""
    from sim.costs.knobs import VLLM_CAPTURE_SIZES

    pricing = (raw.get("engine") or {}).get("pricing") or {}
    sizes = pricing.get("cuda_graph_capture_sizes")
    if sizes is None:
        return {}
    if isinstance(sizes, list) and tuple(sizes) == VLLM_CAPTURE_SIZES:
        sizes = "vllm"
    return {"pricing": {"cuda_graph_capture_sizes": sizes}}
