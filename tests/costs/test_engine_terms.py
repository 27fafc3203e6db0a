"""Engine terms a scenario adds on top of its profile: the front end's time per request
(`engine.frontend_s`), a cold start (`engine.cold_start_s`), the GPU-time scale
(`engine.pricing.gpu_time_scale`), and engine presets (`engine.preset`) that carry them,
merged under the scenario's own fields."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from scenario_factory import UNIT, run, unit_trace

from sim import ScenarioError, load_scenario_dict
from sim.scenario.engine_preset import PRESETS_DIR, shipped_presets

# the module, not the function `sim.simulate` that the package exports under the same name
SIMULATE = importlib.import_module("sim.simulate.run")

# every step costs 10 ms plus 20 us per token: no CPU overhead, no padding
PROFILE = {"coefficients": {"t_mem_s": 0.01, "t_flop_s_per_token": 2e-5}}
POLICY = {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 1024}
# overlapping requests: a schedule that queues, batches and shifts with every delay
ROWS = [(0.0, 300, 12), (0.004, 80, 30), (0.013, 500, 5), (0.021, 40, 17), (0.09, 200, 9),
        (0.0905, 120, 22), (0.2, 60, 3)]  # fmt: skip


def raw(tmp_path: Path, rows: list[tuple[float, int, int]], **engine: Any) -> dict[str, Any]:
    return unit_trace(tmp_path, rows, dict(POLICY), profile=copy.deepcopy(PROFILE), engine=engine)


def requests(raw_scenario: dict[str, Any], tmp_path: Path) -> pd.DataFrame:
    return run(raw_scenario, tmp_path).requests


def test_frontend_s_adds_exactly_to_a_lone_requests_ttft_not_to_its_tpot(tmp_path: Path) -> None:
    rows = [(0.5, 100, 10)]
    plain = requests(raw(tmp_path, rows), tmp_path).iloc[0]
    delayed = requests(raw(tmp_path, rows, frontend_s=0.003), tmp_path).iloc[0]
    # prefill of 100 tokens: 10 ms + 100 * 20 us
    assert plain["ttft_s"] == pytest.approx(0.012, abs=1e-12)
    assert delayed["ttft_s"] == pytest.approx(0.015, abs=1e-12)
    assert delayed["e2e_s"] - plain["e2e_s"] == pytest.approx(0.003, abs=1e-12)
    assert delayed["tpot_s"] == pytest.approx(plain["tpot_s"], abs=1e-12)
    # latencies count from the arrival, which the delay does not move
    assert delayed["arrival_s"] == plain["arrival_s"]
    assert delayed["first_token_s"] - plain["first_token_s"] == pytest.approx(0.003, abs=1e-12)
    assert delayed["queue_s"] - plain["queue_s"] == pytest.approx(0.003, abs=1e-12)


def test_pushed_and_pulled_arrivals_give_the_same_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = raw(tmp_path, ROWS, frontend_s=0.0047)
    pulled = requests(spec, tmp_path)
    monkeypatch.setattr(SIMULATE, "pulls_arrivals", lambda cluster, reqs: False)
    pushed = requests(spec, tmp_path)
    pd.testing.assert_frame_equal(pulled, pushed)
    # and the delay changed the schedule (the comparison is not between two no-ops)
    monkeypatch.undo()
    assert not requests(raw(tmp_path, ROWS), tmp_path)["ttft_s"].equals(pulled["ttft_s"])


def test_frontend_s_on_a_cluster_delays_each_request_by_exactly_that(tmp_path: Path) -> None:
    # two instances, requests far apart: each one runs alone, pushed by the source
    rows = [(0.0, 100, 4), (1.0, 200, 6), (2.0, 50, 8)]
    cluster = {"router": "round_robin", "instances": [{"count": 2}]}
    plain = requests({**raw(tmp_path, rows), "cluster": cluster}, tmp_path)
    delayed = requests({**raw(tmp_path, rows, frontend_s=0.02), "cluster": cluster}, tmp_path)
    assert list(delayed["instance"]) == [0, 1, 0]
    assert (delayed["ttft_s"] - plain["ttft_s"]).tolist() == pytest.approx([0.02] * 3, abs=1e-12)
    assert delayed["tpot_s"].tolist() == pytest.approx(plain["tpot_s"].tolist(), abs=1e-12)




@pytest.mark.parametrize("cluster", [None, {"router": "round_robin", "instances": [{"count": 2}]}])
def test_cold_start_holds_the_first_requests_and_nothing_after(
    tmp_path: Path, cluster: dict[str, Any] | None
) -> None:
    """With `cold_start_s: 3` the instances serve nothing before t = 3: the requests sent at 0
    and 1 are scheduled together at 3 (first tokens at 4, finishes at 5), and a request sent at
    10 runs as it would without the cold start; pushed (cluster) or pulled (lone instance)."""
    rows = [(0.0, 4, 2), (1.0, 4, 2), (10.0, 4, 2)]

    def case(cold: float) -> pd.DataFrame:
        out = unit_trace(tmp_path, rows, dict(POLICY), profile=copy.deepcopy(UNIT),
                       engine={"cold_start_s": cold})
        return requests({**out, "cluster": cluster} if cluster else out, tmp_path)

    warm, cold = case(0.0), case(3.0)
    assert warm["first_token_s"].tolist() == [1.0, 2.0, 11.0]
    assert cold["first_token_s"].tolist() == [4.0, 4.0, 11.0]
    assert cold["finish_s"].tolist() == [5.0, 5.0, 12.0]
    assert cold["ttft_s"].tolist() == [4.0, 3.0, 1.0]


def test_gpu_time_scale_halves_every_step(tmp_path: Path) -> None:
    # every request arrives at 0: the schedule cannot depend on the steps' durations
    rows = [(0.0, p, o) for _, p, o in ROWS]
    full = run(raw(tmp_path, rows), tmp_path)
    half = run(raw(tmp_path, rows, pricing={"gpu_time_scale": 0.5}), tmp_path)
    a = full.steps
    b = half.steps
    assert len(a) == len(b) > 5
    for column in ("duration_s", "duration_increment_s", "start_s", "end_s"):
        assert b[column].to_numpy() == pytest.approx(0.5 * a[column].to_numpy(), abs=1e-12)
    for column in ("num_steps", "num_tokens", "num_seqs"):
        assert b[column].tolist() == a[column].tolist()


def write_preset(path: Path, engine: dict[str, Any], kind: str = "engine_preset") -> Path:
    doc = {"schema_version": 1, "kind": kind, "name": path.stem, "engine": engine}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


PRESET_ENGINE = {
    "frontend_s": 0.002,
    "pricing": {"gpu_time_scale": 0.7, "cpu_overhead": {"per_step_s": 0.001, "per_seq_s": 1e-5}},
}


def test_a_scenario_naming_a_preset_file_gets_its_fields(tmp_path: Path) -> None:
    write_preset(tmp_path / "p.yaml", PRESET_ENGINE)
    loaded = load_scenario_dict(raw(tmp_path, ROWS, preset="p.yaml"), base_dir=tmp_path)
    engine = loaded.variants[0].spec.engine
    assert engine.preset == "p.yaml"
    assert engine.frontend_s == 0.002
    assert engine.pricing is not None and engine.pricing.gpu_time_scale == 0.7
    assert engine.pricing.cpu_overhead is not None
    assert engine.pricing.cpu_overhead.per_step_s == 0.001
    # and it is the same run as the fields written out
    inline = requests(raw(tmp_path, ROWS, **copy.deepcopy(PRESET_ENGINE)), tmp_path)
    named = requests(raw(tmp_path, ROWS, preset="p.yaml"), tmp_path)
    pd.testing.assert_frame_equal(inline, named)


def test_the_scenarios_own_engine_fields_win_key_by_key(tmp_path: Path) -> None:
    write_preset(tmp_path / "p.yaml", PRESET_ENGINE)
    spec = raw(tmp_path, ROWS, preset="p.yaml", pricing={"cpu_overhead": {"per_step_s": 0.005}})
    engine = load_scenario_dict(spec, base_dir=tmp_path).variants[0].spec.engine
    assert engine.pricing is not None and engine.pricing.cpu_overhead is not None
    assert engine.pricing.cpu_overhead.per_step_s == 0.005  # the scenario's
    assert engine.pricing.cpu_overhead.per_seq_s == 1e-5  # the preset's, same mapping
    assert engine.pricing.gpu_time_scale == 0.7  # the preset's
    assert engine.frontend_s == 0.002


def test_the_shipped_preset_resolves_by_name(tmp_path: Path) -> None:
    assert "vllm-0.11_h100-sxm" in shipped_presets()
    spec = raw(tmp_path, ROWS, preset="vllm-0.11_h100-sxm")
    engine = load_scenario_dict(spec, base_dir=tmp_path).variants[0].spec.engine
    shipped = yaml.safe_load((PRESETS_DIR / "vllm-0.11_h100-sxm.yaml").read_text())["engine"]
    assert engine.frontend_s == shipped["frontend_s"] > 0
    assert engine.pricing is not None and engine.pricing.cpu_overhead is not None
    step_s = shipped["pricing"]["cpu_overhead"]["per_step_s"]
    assert engine.pricing.cpu_overhead.per_step_s == step_s
    assert engine.pricing.capture_sizes()[-1] == 512


VIDUR_7B_H100 = Path(__file__).resolve().parents[2] / (
    "calibration/profiles/imported/vidur/llama-2-7b_h100-sxm.yaml"
)


def _preset_engine(tmp_path: Path, profile: Any, **engine: Any) -> Any:
    spec = raw(tmp_path, ROWS, preset="vllm-0.11_h100-sxm", **engine)
    spec |= {"profile": profile, "model": "llama-2-7b", "hardware": "h100-sxm"}
    return load_scenario_dict(spec, base_dir=tmp_path).variants[0].spec.engine


def test_a_preset_keeps_its_kernel_correction_on_the_profile_it_was_fitted_on(
    tmp_path: Path,
) -> None:
    shipped = yaml.safe_load((PRESETS_DIR / "vllm-0.11_h100-sxm.yaml").read_text())
    assert shipped["provenance"]["setup"]["profile"] == "vidur-llama-2-7b_h100-sxm"
    engine = _preset_engine(tmp_path, str(VIDUR_7B_H100))
    assert engine.preset_scope == "all"
    assert engine.pricing is not None
    assert engine.pricing.gpu_time_scale == shipped["engine"]["pricing"]["gpu_time_scale"] != 1


def test_on_another_profile_a_preset_applies_its_engine_terms_only(tmp_path: Path) -> None:
    """A preset's GPU-time scale corrects the profile it was fitted on (the issue's case: the
    7B table's 0.90 made another model's table 8-15 % too fast); its engine terms transfer."""
    shipped = yaml.safe_load((PRESETS_DIR / "vllm-0.11_h100-sxm.yaml").read_text())["engine"]
    engine = _preset_engine(tmp_path, copy.deepcopy(PROFILE))
    assert engine.preset_scope == "engine terms only"
    assert engine.pricing is not None and engine.pricing.cpu_overhead is not None
    assert engine.pricing.gpu_time_scale == 1.0  # the kernel correction dropped
    assert "gpu_time_scale" not in engine.pricing.model_fields_set  # a profile's own wins
    step_s = shipped["pricing"]["cpu_overhead"]["per_step_s"]
    assert engine.pricing.cpu_overhead.per_step_s == step_s
    assert engine.frontend_s == shipped["frontend_s"]
    assert engine.pricing.capture_sizes()[-1] == 512
    # the roofline and events profiles price host time per step themselves: not twice
    for profile in ("roofline", "events"):
        engine = _preset_engine(tmp_path, profile)
        assert engine.preset_scope == "front end and graph sizes only"
        assert engine.pricing is not None and engine.pricing.cpu_overhead is None
        assert engine.pricing.gpu_time_scale == 1.0
        assert engine.frontend_s == shipped["frontend_s"]
        assert engine.pricing.capture_sizes()[-1] == 512
    # a scenario that states its own scale keeps it, whatever the profile
    own = _preset_engine(tmp_path, "roofline", pricing={"gpu_time_scale": 0.95})
    assert own.pricing is not None and own.pricing.gpu_time_scale == 0.95
    assert own.preset_scope is None and own.preset_profile is None


def test_a_preset_cannot_set_what_batchsim_sets(tmp_path: Path) -> None:
    write_preset(tmp_path / "p.yaml", {"frontend_s": 0.001, "preset_scope": "all"})
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(raw(tmp_path, ROWS, preset="p.yaml"), base_dir=tmp_path)
    assert "p.yaml" in str(info.value) and "engine.preset_scope" in str(info.value)


@pytest.mark.parametrize(
    ("preset", "files", "expect"),
    [
        ("no-such-preset", {}, ("engine.preset", "no engine preset 'no-such-preset'")),
        ("missing.yaml", {}, ("missing.yaml",)),
        ("wrong.yaml", {"wrong.yaml": ("profile", {"frontend_s": 0.1})}, ("wrong.yaml", "kind")),
        ("chain.yaml", {"chain.yaml": ("engine_preset", {"preset": "p.yaml"})},
         ("chain.yaml", "engine.preset", "another preset")),
    ],
)  # fmt: skip
def test_a_bad_preset_is_one_line_naming_it(
    tmp_path: Path, preset: str, files: dict[str, Any], expect: tuple[str, ...]
) -> None:
    for name, (kind, engine) in files.items():
        write_preset(tmp_path / name, engine, kind)
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(raw(tmp_path, ROWS, preset=preset), base_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    for text in expect:
        assert text in message, message


def test_a_preset_value_out_of_range_is_refused(tmp_path: Path) -> None:
    write_preset(tmp_path / "p.yaml", {"frontend_s": -1.0})
    with pytest.raises(ScenarioError) as info:
        load_scenario_dict(raw(tmp_path, ROWS, preset="p.yaml"), base_dir=tmp_path)
    # blamed on the preset, where the value is
    assert str(info.value) == f"{tmp_path / 'p.yaml'}: engine.frontend_s: must be >= 0 (got -1.0)"
