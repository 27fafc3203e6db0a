"""`batchsim calibrate-engine --points`: closed-loop points that batchsim itself measured with
known engine terms are fitted back to those terms; each statistic is an exact linear function of
the step terms (one simulation counts it); the points readers of CSV tables, `vllm bench serve`
results and GuideLLM sweeps."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scenario_factory import chunked, poisson, scenario

from sim import ScenarioError, load_scenario_dict, simulate
from sim.cli.main import main
from sim.io.destination import marker_kind
from sim.measured.points import LoadPoint, read_points
from sim.whatif.calibrate_points import Design, count_point, fit_points, point_raw

PROFILE = {"coefficients": {"t_mem_s": 0.008, "t_flop_s_per_token": 3e-5}}
TRUE = {"gpu_time_scale": 1.2, "per_step_s": 0.002, "frontend_s": 0.003}
ENGINE = {
    "frontend_s": TRUE["frontend_s"],
    "pricing": {"gpu_time_scale": TRUE["gpu_time_scale"],
                "cpu_overhead": {"per_step_s": TRUE["per_step_s"], "overlap": False}},
}  # fmt: skip
SWEEPS = ((200, 40), (800, 20))
CLIENTS = (1, 4, 16)


def base(**extra: Any) -> dict[str, Any]:
    return scenario(
        name="pts",
        workload=poisson(4, 1.0, 10, 10),
        profile=PROFILE,
        policy=chunked(max_num_seqs=64, max_num_batched_tokens=2048),
        **extra,
    )


def load(conc: int, isl: int, osl: int) -> LoadPoint:
    return LoadPoint(label=f"c{conc}", group=f"{isl}/{osl}", concurrency=conc, prompt_tokens=isl,
                     output_tokens=osl, range_ratio=0.5, num_requests=6 * conc,
                     throughput_tok_s=1.0, tpot_mean_s=1.0, ttft_mean_s=1.0)  # fmt: skip


def measure(point: LoadPoint, engine: dict[str, Any]) -> tuple[float, float, float]:
    """(throughput tok/s, mean TPOT, mean TTFT) of a simulated run of the point."""
    raw = point_raw(base(), point, {})
    raw["engine"] = copy.deepcopy(engine)
    result = next(iter(simulate(load_scenario_dict(raw)).variants.values()))
    s, done = result.summary(), result.requests
    tokens = float(done["num_prompt_tokens"].sum() + done["num_output_tokens"].sum())
    return tokens / float(s["duration_s"]), float(s["tpot_mean_s"]), float(s["ttft_mean_s"])


@pytest.fixture(scope="module")
def points_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of each length pair, measured by batchsim with the TRUE terms."""
    folder = tmp_path_factory.mktemp("points")
    path = folder / "points.csv"
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["conc", "isl", "osl", "random_range_ratio", "num_requests",
                      "total_tput_tok_s", "tpot_mean_s", "ttft_mean_s", "notes"])
        for isl, osl in SWEEPS:
            for conc in CLIENTS:
                tput, tpot, ttft = measure(load(conc, isl, osl), ENGINE)
                out.writerow([conc, isl, osl, 0.5, 6 * conc, tput, tpot, ttft, "x"])
    (folder / "s.yaml").write_text(yaml.safe_dump(base()))
    return path


def test_each_statistic_is_linear_in_the_step_terms() -> None:
    """One simulation at neutral terms predicts a run at other terms exactly (no front end:
    in a closed loop every arrival is on a step boundary, so the schedule never moves)."""
    points = [load(c, 200, 40) for c in (1, 8)]
    design = Design(points, [count_point(base(), p) for p in points])
    terms = {"gpu_time_scale": 0.7, "per_step_s": 0.004, "per_seq_s": 3e-5}
    engine = {"pricing": {"gpu_time_scale": 0.7, "cpu_overhead": {
        "per_step_s": 0.004, "per_seq_s": 3e-5, "overlap": False}}}
    tput, tpot, ttft = design.predict(terms)
    for i, point in enumerate(points):
        assert measure(point, engine) == pytest.approx((tput[i], tpot[i], ttft[i]), rel=1e-9)


def test_the_fit_finds_the_terms_again_and_reports_held_out_error(
    points_csv: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fitted.yaml"
    code = main(["calibrate-engine", "--points", str(points_csv), "--scenario",
                 str(points_csv.parent / "s.yaml"), "--out", str(out), "-q"])
    assert code == 0
    doc = yaml.safe_load(out.read_text())
    terms = doc["provenance"]["fit"]["terms"]
    assert terms["gpu_time_scale"] == pytest.approx(TRUE["gpu_time_scale"], rel=0.01)
    assert terms["per_step_s"] == pytest.approx(TRUE["per_step_s"], rel=0.05)
    assert terms["frontend_s"] == pytest.approx(TRUE["frontend_s"], rel=0.05)
    fit = doc["provenance"]["fit"]
    assert fit["cross_validation"] == "leave one sweep out"
    assert (fit["points"], fit["sweeps"]) == (6, 2)
    before = fit["errors_before"]["tput_err"]["median_abs_pct"]
    for stage in ("errors_fit", "errors_cross_validated", "errors_simulated_at_fit"):
        for metric in ("tput_err", "tpot_err"):
            assert fit[stage][metric]["worst_abs_pct"] < 2.0 < before, (stage, metric)
    assert fit["errors_simulated_at_fit"]["ttft_err"]["worst_abs_pct"] < 2.0
    table = (tmp_path / "fitted.points" / "points.csv").read_text().splitlines()
    assert len(table) == 7 and "cv_tput_err" in table[0]
    # the preset is an engine preset a scenario names, fitted on the scenario's profile
    assert doc["engine"]["pricing"]["cpu_overhead"]["overlap"] is False
    assert doc["provenance"]["setup"]["profile"] == "inline"
    raw = point_raw(base(engine={"preset": str(out)}), load(4, 200, 40), {})
    raw["engine"] = {"preset": str(out)}
    spec = load_scenario_dict(raw).variants[0].spec
    assert spec.engine.frontend_s == terms["frontend_s"]


def test_one_sweep_is_cross_validated_point_by_point(points_csv: Path) -> None:
    points = [p for p in read_points([points_csv]) if p.prompt_tokens == 200]
    fit = fit_points(base(), points, ("gpu_time_scale", "per_step_s"))
    assert fit.cv_method == "leave one point out"
    assert len(fit.cross_validated) == len(points)
    assert "frontend_s" not in fit.terms
    assert np.abs(fit.cross_validated["tpot_err"]).max() < 3.0


def test_csv_reader_columns_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("conc,isl,osl,tput_per_gpu,num_gpus,tpot_mean_s,ttft_mean_s,extra\n"
                    "8,1024,512,1000,4,0.02,,zzz\n")
    (point,) = read_points([path])
    assert point.concurrency == 8 and point.num_requests == 80
    assert point.throughput_tok_s == 4000.0 and point.ttft_mean_s is None
    assert point.lengths(1024) == {"dist": "fixed", "value": 1024}
    assert point.label == "p.csv line 2"


def _bench(conc: int | None, duration: float) -> dict[str, Any]:
    return {"backend": "vllm", "max_concurrency": conc, "duration": duration,
            "input_lens": [100, 300], "output_lens": [3, 5], "ttfts": [0.1, 0.3],
            "itls": [[0.05, 0.05], [0.02] * 4], "errors": ["", ""]}  # fmt: skip


def test_vllm_bench_results_are_points(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_bench(2, 2.0)) + "\n" + json.dumps(_bench(4, 1.0)) + "\n")
    first, second = read_points([path])
    assert (first.concurrency, second.concurrency) == (2, 4)
    assert first.throughput_tok_s == pytest.approx((400 + 8) / 2.0)
    assert (first.prompt_tokens, first.output_tokens) == (200, 4)
    assert first.tpot_mean_s == pytest.approx((0.05 + 0.02) / 2)
    assert first.ttft_mean_s == pytest.approx(0.2)
    assert first.label == "sweep.json result 0"
    path.write_text(json.dumps(_bench(None, 2.0)))
    with pytest.raises(ScenarioError, match="not a closed-loop point"):
        read_points([path])


def test_guidellm_concurrent_benchmarks_are_points(tmp_path: Path) -> None:
    t0 = 1_769_021_450.0

    def request(start: float, e2e: float) -> dict[str, Any]:
        return {"request_id": f"r{start}", "prompt_tokens": 50, "output_tokens": 5,
                "start_time": t0 + start, "end_time": t0 + start + e2e,
                "first_token_time": t0 + start + 0.1, "last_token_time": t0 + start + e2e}

    benches = []
    for i, strategy in enumerate(({"type_": "concurrent", "streams": 2},
                                  {"type_": "constant", "rate": 3.0})):
        requests = [request(10 * i, 0.5), request(10 * i + 0.2, 0.5)]
        benches.append({"type_": "generative_benchmark", "config": {"strategy": strategy},
                        "requests": {"successful": requests, "incomplete": [], "errored": []}})
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"metadata": {"guidellm_version": "0.2.0"},
                                "benchmarks": benches}))
    (point,) = read_points([path])
    assert point.concurrency == 2 and point.label == "g.json benchmark 0"
    assert point.throughput_tok_s == pytest.approx(110 / 0.7)
    assert point.tpot_mean_s == pytest.approx(0.1)


def test_the_table_goes_to_its_own_marked_folder_and_no_file_beside_the_preset_is_touched(
    points_csv: Path, tmp_path: Path
) -> None:
    """The per-point table once went to `<preset stem>.points.csv` beside the preset, over a
    user's file of that name (here the points file itself); it now goes to a folder batchsim
    marks as its own, which a second fit reuses."""
    mine = tmp_path / "in.points.csv"
    rows = points_csv.read_text().splitlines()
    mine.write_text("\n".join(rows[:3]) + "\n")  # one sweep, two points: a quick fit
    before = mine.read_bytes()
    out = tmp_path / "in.yaml"
    argv = ["calibrate-engine", "--points", str(mine), "--scenario",
            str(points_csv.parent / "s.yaml"), "--out", str(out), "-q", "--fit", "per_step_s"]
    for _ in range(2):
        assert main(argv) == 0
        assert mine.read_bytes() == before
        assert marker_kind(tmp_path / "in.points") == "points"
        table = (tmp_path / "in.points" / "points.csv").read_text().splitlines()
        assert len(table) == 3 and table[0].startswith("point,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.points", "in.points.csv", "in.yaml"]
