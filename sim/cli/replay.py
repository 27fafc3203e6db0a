"""`batchsim replay RUN --scenario S` and `batchsim calibrate-engine RUN... --scenario S`.

`replay` puts a measured run of a real engine through a scenario with the run's exact arrivals
and lengths (and, with `--vllm-log`, the engine's own limits, KV blocks and CUDA-graph sizes),
writes a results folder like `run`'s plus the comparison (`comparison.json`, `comparison.csv`,
plots and a report section), and prints measured against simulated.

`calibrate-engine` fits the engine terms a profile leaves out (`sim.whatif.calibrate_engine`) to
one or more measured runs and writes an engine preset any scenario can name (`engine.preset`);
`--holdout RUN` or `--fit-window A:B` report the error on requests the fit never saw.

Options a measured file cannot carry (the shared prompt prefix, which benchmark of a sweep, the
engine log, the catalog model and GPU) come from flags or from `--options FILE` (YAML with the
same names: `format`, `benchmark`, `prefix_tokens`, `prefix_groups`, `vllm_log`, `model`,
`hardware`); a flag wins over the file.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from sim.cli.args import examples, nonnegative_int, positive_int
from sim.errors import ScenarioError
from sim.inputs.strict_model import StrictModel

FORMATS = ("vllm_otlp", "vllm_bench", "guidellm", "aiperf", "batchsim")


class ReplayOptions(StrictModel):
    """`--options FILE`: what a measured file cannot say of itself."""

    format: str | None = None
    benchmark: int | None = Field(default=None, ge=0, le=100_000)
    prefix_tokens: int = Field(default=0, ge=0, le=10_000_000)
    prefix_groups: int = Field(default=1, ge=1, le=1_000_000)
    vllm_log: str | None = None
    model: str | None = None
    hardware: str | None = None


# the committed real run and its replay scenario, as the commands' examples name them
_RUN = "calibration/measured/vllm-0.11-h100-llama-2-7b"
COMMITTED_RUN = (
    f"{_RUN}/traces.json --scenario scenarios/measured/vllm-0.11_h100_llama-2-7b.yaml "
    f"--vllm-log {_RUN}/vllm.log"
)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", type=Path, required=True, help="base scenario YAML")
    parser.add_argument("--format", choices=FORMATS, help="the run's format (default: detected)")
    parser.add_argument(
        "--benchmark", type=nonnegative_int, metavar="I",
        help="which benchmark of a file with several (from 0)",
    )
    parser.add_argument("--vllm-log", type=Path, help="the engine's startup log: limits, KV blocks")
    parser.add_argument("--model", help="catalog model (default: from the log, or the scenario)")
    parser.add_argument("--hardware", help="catalog GPU (default: the scenario's)")
    parser.add_argument(
        "--prefix-tokens", type=nonnegative_int, metavar="N",
        help="tokens every prompt shares at its start",
    )
    parser.add_argument(
        "--prefix-groups", type=positive_int, metavar="K", help="distinct shared prefixes"
    )
    parser.add_argument("--options", type=Path, help="YAML with any of the options above")
    parser.add_argument("--drop-duplicates", action="store_true",
                        help="keep the first row of a request id that appears twice")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a field of the replayed scenario",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")


def register(sub: Any) -> None:
    replay = sub.add_parser(
        "replay",
        help="replay a measured run through a scenario and compare with it",
        **examples(f"batchsim replay {COMMITTED_RUN}"),
    )
    replay.add_argument("run", type=Path, help="measured run: spans, bench JSON, results folder")
    _common(replay)
    replay.add_argument("--out", type=Path, default=Path("results"), help="parent folder")
    replay.add_argument("--name", help="results folder name (default: <scenario name>-replay)")
    replay.add_argument("--no-plots", action="store_true", help="skip the plots")
    replay.set_defaults(handler=_replay)
    fit = sub.add_parser(
        "calibrate-engine",
        help="fit engine overheads to measured runs (no GPU) and write an engine preset",
        **examples(
            f"batchsim calibrate-engine {COMMITTED_RUN} --fit-window 0:300 --out my-preset.yaml",
            "batchsim calibrate-engine --points sweep.csv --scenario base.yaml --out preset.yaml",
        ),
    )
    fit.add_argument("runs", type=Path, nargs="*", help="measured runs to fit")
    _common(fit)
    fit.add_argument(
        "--points", type=Path, action="append", default=[], metavar="FILE",
        help="closed-loop benchmark points to fit instead of runs: a CSV table, vllm bench "
        "serve results or a GuideLLM sweep (repeatable)",
    )
    fit.add_argument("--holdout", type=Path, action="append", default=[], metavar="RUN",
                     help="a run to check the fit on, never fitted (repeatable)")
    fit.add_argument("--fit-window", metavar="A:B",
                     help="fit on arrivals in [A, B) s of each run; the rest is held out")
    fit.add_argument("--fit", default="per_step_s,gpu_time_scale,frontend_s",
                     help="terms to fit (comma-separated; also per_seq_s)")
    fit.add_argument("--out", type=Path, required=True, help="the preset file to write (.yaml)")
    fit.add_argument("--name", help="the preset's name (default: the file's stem)")
    fit.set_defaults(handler=_calibrate)


def _options(args: argparse.Namespace) -> ReplayOptions:
    base: dict[str, Any] = {}
    if args.options is not None:
        from sim.inputs.strict_yaml import load_yaml
        from sim.inputs.text import check_regular_file, read_text

        check_regular_file(args.options, "options file")
        doc = load_yaml(read_text(args.options, "options file"), str(args.options))
        if not isinstance(doc, dict):
            raise ScenarioError("must be a mapping of options", file=str(args.options))
        base = doc
    flags = {
        "format": args.format,
        "benchmark": args.benchmark,
        "prefix_tokens": args.prefix_tokens,
        "prefix_groups": args.prefix_groups,
        "vllm_log": str(args.vllm_log) if args.vllm_log is not None else None,
        "model": args.model,
        "hardware": args.hardware,
    }
    merged = {**base, **{k: v for k, v in flags.items() if v is not None}}
    try:
        options = ReplayOptions.model_validate(merged)
    except ValidationError as exc:
        from sim.inputs.messages import as_error, problems

        raise as_error(problems(exc, ReplayOptions), str(args.options or "options")) from None
    if options.format is not None and options.format not in FORMATS:
        raise ScenarioError(
            f"format {options.format!r} is not one of {', '.join(FORMATS)}",
            file=str(args.options or "--format"),
        )
    return options


def _prepare(args: argparse.Namespace, run_path: Path, options: ReplayOptions) -> Any:
    """(the measured run, its replay scenario's mapping, notes from the engine log, its `Load`); a
    closed-loop benchmark is replayed by as many clients as it had (`sim.measured.load`), and
    the line that says so, or why it cannot be, is printed (stderr for a caveat)."""
    from sim.measured import read_measured, read_vllm_log
    from sim.measured.load import load_of
    from sim.scenario.load import read_scenario
    from sim.whatif.replay import replay_raw

    base = read_scenario(args.scenario)
    run = read_measured(run_path, options.format, benchmark=options.benchmark,
                        drop_duplicates=args.drop_duplicates)
    load = load_of(run)
    if load.note and not args.quiet:
        print(("batchsim: note: " if load.caveat else "") + load.note,
              file=sys.stderr if load.caveat else sys.stdout)  # fmt: skip
    engine = None
    if options.vllm_log is not None:
        engine = read_vllm_log(Path(options.vllm_log))
    raw, notes = replay_raw(
        base,
        run_path,
        fmt=run.format,
        benchmark=options.benchmark,
        prefix_tokens=options.prefix_tokens,
        prefix_groups=options.prefix_groups,
        engine=engine,
        model=options.model,
        hardware=options.hardware,
        log_file=options.vllm_log or "",
        drop_duplicates=args.drop_duplicates,
        clients=load.clients,
    )
    return run, raw, notes, load


def _replay(args: argparse.Namespace) -> int:
    from sim.cli.signals import raise_if_interrupted
    from sim.io.destination import check_destination
    from sim.io.output import write_results
    from sim.io.replay_output import write_replay_files
    from sim.metrics.compare import format_comparison
    from sim.whatif.replay import load_replay, replay

    options = _options(args)
    run, raw, notes, load = _prepare(args, args.run, options)
    scenario = load_replay(raw, str(args.scenario), args.scenario.resolve().parent, args.overrides)
    folder = args.name or f"{scenario.name}-replay"
    dest = check_destination(args.out, folder)
    result = replay(scenario, run, notes, load_note=load.note)
    if result.window_note and not args.quiet:
        print(f"batchsim: note: {result.window_note}", file=sys.stderr)
    out_dir = write_results(
        result.results,
        dest,
        scenario.dump(),
        plots=not args.no_plots,
        progress=not args.quiet,
        before_commit=raise_if_interrupted,
        extra_files=lambda folder: write_replay_files(result, folder, plots=not args.no_plots),
    )
    if not args.quiet:
        if notes:
            print("from the engine log: " + ", ".join(notes))
        for name, comparison in result.comparisons.items():
            print(format_comparison(comparison, f"\n{name}: measured vs simulated"))
        print(f"\n{len(run)} measured requests replayed; results in {out_dir}/")
    return 0


def _window(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        start, end = (float(part) for part in text.split(":"))
    except ValueError:
        raise ScenarioError(f"{text!r} is not A:B in seconds", path="--fit-window") from None
    if not (math.isfinite(start) and math.isfinite(end)) or not 0 <= start < end:
        raise ScenarioError(f"{text!r}: need 0 <= A < B, both finite", path="--fit-window")
    return start, end


def _calibrate(args: argparse.Namespace) -> int:
    import yaml

    from sim.io.workload_export import write_atomically
    from sim.whatif.calibrate_engine import FitCase, file_digest, fit_engine, preset_document
    from sim.whatif.replay import load_replay

    options = _options(args)
    terms = tuple(t.strip() for t in args.fit.split(",") if t.strip())
    if args.points:
        from sim.cli.calibrate_points import calibrate_points

        return calibrate_points(args, options, terms)
    if not args.runs:
        raise ScenarioError("give measured runs to fit, or --points FILE", path="calibrate-engine")
    window = _window(args.fit_window)
    from sim.cli.calibrate_points import check_preset_out, preset_base, resolved

    check_preset_out(args.out)
    fitted = {file_digest(p): p for p in args.runs if p.is_file() or p.is_dir()}
    for path in args.holdout:
        same = fitted.get(file_digest(path)) if path.is_file() or path.is_dir() else None
        if same is not None:
            raise ScenarioError(f"is the same run as the fitted {same} (the same bytes): a "
                                "held-out run must be one the fit never saw", file=str(path),
                                path="--holdout")  # fmt: skip
    base_dir = args.scenario.resolve().parent
    cases: list[Any] = []
    holdout: list[Any] = []
    runs_doc: list[dict[str, Any]] = []
    holdout_doc: list[dict[str, Any]] = []
    setup: dict[str, Any] = {}
    for role, paths in (("fit", args.runs), ("holdout", args.holdout)):
        for path in paths:
            run, raw, notes, _ = _prepare(args, path, options)
            scenario = load_replay(raw, str(args.scenario), base_dir, args.overrides)
            raw, this_setup = resolved(scenario, notes)
            setup = setup or this_setup
            entry = {"file": path.name, "format": run.format, "requests": len(run),
                     "sha256": file_digest(path)}
            if role == "fit" and window is not None:
                inside, outside = _split(raw, run, window, str(path), base_dir)
                cases.append(inside)
                holdout.extend(outside)
                entry["window_s"] = list(window)
            elif role == "fit":
                cases.append(FitCase(run, raw, base_dir, path.name))
            else:
                holdout.append(FitCase(run, raw, base_dir, path.name))
            (runs_doc if role == "fit" else holdout_doc).append(entry)
    progress = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    fit = fit_engine(cases, holdout, terms, progress=progress)
    engine = fit.engine_fields(preset_base(cases[0].raw))
    name = args.name or args.out.stem
    doc = preset_document(fit, name=name, engine=engine, runs=runs_doc, holdout=holdout_doc,
                          setup=setup)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=96)
    write_atomically(args.out, text)
    if not args.quiet:
        _print_fit(fit)
        print(f"\npreset written to {args.out} (name it in a scenario: engine: {{preset: "
              f"{args.out}}})")
    return 0


def _split(raw: dict[str, Any], run: Any, window: tuple[float, float], file: str,
           base_dir: Path) -> tuple[Any, list[Any]]:
    """The fitted part of a run (arrivals in the window) and the held-out rest."""
    from sim.whatif.calibrate_engine import FitCase

    start, end = window
    span = float(run.arrival_s[-1]) + 1.0

    def part(a: float, b: float, label: str) -> Any:
        piece = dict(raw)
        trace = {**raw["workload"]["trace"], "start_s": a, "end_s": b}
        piece["workload"] = {**raw["workload"], "trace": trace}
        return FitCase(run.window(a, b), piece, base_dir, label)

    inside = part(start, end, f"{Path(file).name} [{start:g}, {end:g}) s")
    outside = []
    for a, b in ((0.0, start), (end, span)):
        if b > a and ((run.arrival_s >= a) & (run.arrival_s < b)).any():
            outside.append(part(a, b, f"{Path(file).name} [{a:g}, {b:g}) s"))
    return inside, outside


def _print_fit(fit: Any) -> None:
    from sim.whatif.calibrate_engine import headline

    terms = ", ".join(f"{k} = {v:g}" for k, v in fit.terms.items())
    print(f"fitted ({fit.evaluations} replays): {terms}")
    before, after = 100 * fit.objective_before, 100 * fit.objective_after
    print(f"per-request error {before:.2f} % -> {after:.2f} %")
    for title, before, after in (("fitted", fit.before, fit.after),
                                 ("held out", fit.holdout_before, fit.holdout_after)):
        for label in before:
            b, a = headline(before[label]), headline(after[label])
            cells = ", ".join(f"{k.replace('_error_pct', '').replace('_pct', '')} "
                              f"{_pct(b[k])} -> {_pct(a[k])}" for k in b)
            print(f"{title} {label}: {cells}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"
