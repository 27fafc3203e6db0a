"""`batchsim replay` and `batchsim calibrate-engine` end to end on a measured run that batchsim
itself produced with known engine terms (written as vLLM OTLP spans): the replay with the same
terms is exact, and the fit without them finds them again. Also the mapping of a vLLM engine
log onto the replayed scenario."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from helpers_measured import T0, export, span
from scenario_factory import continuous, poisson, scenario

from sim import ScenarioError, load_scenario_dict, simulate
from sim.cli.main import main
from sim.costs.catalog import MODELS
from sim.measured import EngineConfig, read_measured
from sim.whatif.replay import catalog_model, replay_raw

PROFILE = {"coefficients": {"t_mem_s": 0.008, "t_flop_s_per_token": 3e-5}}
TERMS = {"per_step_s": 0.002, "gpu_time_scale": 0.8, "frontend_s": 0.003}
ENGINE = {
    "frontend_s": TERMS["frontend_s"],
    "pricing": {
        "gpu_time_scale": TERMS["gpu_time_scale"],
        "cpu_overhead": {"per_step_s": TERMS["per_step_s"], "overlap": False},
    },
}
N = 30


def base_scenario(**extra: Any) -> dict[str, Any]:
    extra.setdefault("policy", continuous(max_num_seqs=8, max_num_batched_tokens=2048))
    return scenario(name="rp", workload=poisson(5, 5.0, 10, 10), profile=PROFILE, **extra)


def rows() -> list[tuple[float, int, int]]:
    """Arrivals on a whole number of microseconds (exact in ns), varied lengths, some overlap."""
    rng = np.random.default_rng(7)
    out, t = [], 0.0
    for _ in range(N):
        out.append((t, int(rng.integers(30, 600)), int(rng.integers(2, 40))))
        t = round(t + 0.002 + float(rng.exponential(0.06)), 6)
    return out


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with traces.json (the 'measured' run), truth.yaml (the scenario with the terms)
    and base.yaml (the same scenario without them)."""
    folder = tmp_path_factory.mktemp("replay")
    starts = [T0 + round(arrival * 1e9) for arrival, _, _ in rows()]
    # the arrivals as the reader gives them (seconds since the epoch are floats: a few tenths
    # of a microsecond are lost), so that the truth runs on exactly the replay's arrivals
    (folder / "traces.json").write_text(
        export(*(span(t, ttft=0.01, e2e=1.0, rid=f"cmpl-{i}") for i, t in enumerate(starts)))
    )
    arrivals = read_measured(folder / "traces.json").arrival_s
    trace = folder / "truth.csv"
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{a!r},{p},{o}" for a, (_, p, o) in zip(arrivals.tolist(), rows(), strict=True)]
    trace.write_text("\n".join(lines) + "\n")
    truth = base_scenario(engine=copy.deepcopy(ENGINE))
    truth["workload"] = {"trace": {"path": str(trace), "format": "csv"}}
    table = next(iter(simulate(load_scenario_dict(truth, base_dir=folder)).variants.values()))
    requests = table.requests.sort_values("id")
    assert not requests["rejected"].any() and len(requests) == N
    spans = [
        span(
            start,
            ttft=float(r.ttft_s),
            e2e=float(r.e2e_s),
            prompt=str(int(r.num_prompt_tokens)),
            output=str(int(r.num_output_tokens)),
            rid=f"cmpl-{r.id}",
        )
        for start, r in zip(starts, requests.itertuples(), strict=True)
    ]
    (folder / "traces.json").write_text(export(*spans) + "\n")
    (folder / "truth.yaml").write_text(yaml.safe_dump(base_scenario(engine=ENGINE)))
    (folder / "base.yaml").write_text(yaml.safe_dump(base_scenario()))
    return folder


def test_a_replay_with_the_true_terms_is_exact(
    fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", str(fixture / "traces.json"), "--scenario", str(fixture / "truth.yaml"),
                 "--out", str(tmp_path), "--name", "r", "--no-plots"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert f"{N} measured requests replayed" in out
    folder = tmp_path / "r"
    doc = json.loads((folder / "comparison.json").read_text())
    assert doc["measured"]["requests"] == N and doc["measured"]["format"] == "vllm_otlp"
    (variant,) = doc["variants"].values()
    assert variant["counts"]["compared_requests"] == N
    for metric in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p50", "p90", "p99"):
            cell = variant["distributions"][metric][stat]
            assert abs(cell["error_pct"]) < 1e-4, (metric, stat, cell)  # 1e-6 relative
        assert variant["per_request"][metric]["median_ape_pct"] < 1e-4
    csv = (folder / "comparison.csv").read_text().splitlines()
    assert "variant" in csv[0] and len(csv) > 12
    measured = (folder / "measured_requests.csv").read_text().splitlines()
    assert len(measured) == N + 1
    assert "Measured vs simulated" in (folder / "report.html").read_text()


def test_a_replay_without_the_terms_is_off_request_by_request(
    fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", str(fixture / "traces.json"), "--scenario", str(fixture / "base.yaml"),
                 "--out", str(tmp_path), "--name", "r", "--no-plots", "-q"])  # fmt: skip
    assert code == 0 and capsys.readouterr().out == ""
    doc = json.loads((tmp_path / "r" / "comparison.json").read_text())
    (variant,) = doc["variants"].values()
    # the terms nearly cancel in the median, not request by request
    assert variant["per_request"]["ttft"]["median_ape_pct"] > 5
    assert variant["per_request"]["e2e"]["bias_pct"] < -1


def calibrate(fixture: Path, out: Path, *extra: str) -> int:
    return main(["calibrate-engine", str(fixture / "traces.json"), "--scenario",
                 str(fixture / "base.yaml"), "--out", str(out), "-q", *extra])  # fmt: skip


def test_calibrate_engine_recovers_the_terms_and_writes_a_preset(
    fixture: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fitted.yaml"
    assert calibrate(fixture, out) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["kind"] == "engine_preset" and doc["name"] == "fitted"
    terms = doc["provenance"]["fit"]["terms"]
    assert terms["per_step_s"] == pytest.approx(TERMS["per_step_s"], rel=0.15)
    assert terms["gpu_time_scale"] == pytest.approx(TERMS["gpu_time_scale"], rel=0.05)
    assert terms["frontend_s"] == pytest.approx(TERMS["frontend_s"], abs=0.001)
    fit = doc["provenance"]["fit"]
    assert fit["objective_after"] < fit["objective_before"]
    (run,) = doc["provenance"]["runs"]
    digest = hashlib.sha256((fixture / "traces.json").read_bytes()).hexdigest()
    assert run == {"file": "traces.json", "format": "vllm_otlp", "requests": N, "sha256": digest}
    # a scenario naming the preset gets the fitted terms
    named = base_scenario(engine={"preset": str(out)})
    engine = load_scenario_dict(named, base_dir=tmp_path).variants[0].spec.engine
    assert engine.frontend_s == terms["frontend_s"]
    assert engine.pricing is not None and engine.pricing.cpu_overhead is not None
    assert engine.pricing.gpu_time_scale == terms["gpu_time_scale"]
    assert engine.pricing.cpu_overhead.per_step_s == terms["per_step_s"]
    # and a second fit may replace the preset it wrote
    assert calibrate(fixture, out, "--fit", "frontend_s") == 0
    assert set(yaml.safe_load(out.read_text())["provenance"]["fit"]["terms"]) == {"frontend_s"}


def test_a_fit_window_reports_the_held_out_requests(fixture: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.yaml"
    assert calibrate(fixture, out, "--fit-window", "0.5:1.2", "--fit", "frontend_s") == 0
    prov = yaml.safe_load(out.read_text())["provenance"]
    assert prov["runs"][0]["window_s"] == [0.5, 1.2]
    assert list(prov["fit"]["errors_after"]) == ["traces.json [0.5, 1.2) s"]
    held = list(prov["fit"]["holdout_after"])
    assert held[0] == "traces.json [0, 0.5) s"
    assert held[1].startswith("traces.json [1.2, ") and len(held) == 2
    assert list(prov["fit"]["holdout_before"]) == held


def test_calibrate_engine_refuses_to_replace_a_file_it_did_not_write(
    fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "notes.yaml"
    out.write_text("schema_version: 1\nkind: profile\n")
    assert calibrate(fixture, out) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(out) in err[0] and "not replaced" in err[0]
    assert out.read_text() == "schema_version: 1\nkind: profile\n"


RUN_PATH = Path("run.json")


def test_the_engine_log_pins_limits_blocks_graphs_and_parallelism() -> None:
    config = EngineConfig(
        version="0.11.0", model="meta-llama/Llama-2-7b-hf", max_num_seqs=64,
        max_num_batched_tokens=8192, block_size=16, num_gpu_blocks=1234, chunked_prefill=False,
        prefix_caching=True, cuda_graph_capture_sizes=[8, 1, 4, 2], tensor_parallel_size=2,
        max_model_len=4096, dtype="torch.bfloat16",
    )  # fmt: skip
    chunked = {"name": "chunked", "max_num_seqs": 8, "long_prefill_token_threshold": 64}
    base = base_scenario(policy=chunked)
    raw, notes = replay_raw(base, RUN_PATH, engine=config, log_file="vllm.log")
    assert raw["policy"] == {
        "name": "continuous", "mode": "prefill_first", "max_num_seqs": 64,
        "max_num_batched_tokens": 8192, "block_size": 16, "num_gpu_blocks": 1234,
        "prefix_caching": True,
    }  # fmt: skip
    assert raw["model"] == {"name": "llama-2-7b", "max_model_len": 4096, "weight_dtype": "bf16",
                            "kv_dtype": "bf16"}  # fmt: skip
    assert raw["hardware"] == {"name": "a100-80g", "tensor_parallel": 2}
    assert raw["engine"]["pricing"]["cuda_graph_capture_sizes"] == [1, 2, 4, 8]
    assert raw["workload"] == {
        "trace": {"path": str(RUN_PATH.resolve()), "format": "measured", "keep_origin": True}
    }
    assert notes[0] == "vLLM 0.11.0" and "num_gpu_blocks = 1234" in notes
    assert base["policy"]["name"] == "chunked"  # the base is not changed


def test_chunked_prefill_on_keeps_the_bases_chunked_limits() -> None:
    chunked = {"name": "chunked", "max_num_seqs": 8, "max_num_batched_tokens": 512}
    base = base_scenario(policy=chunked)
    raw, _ = replay_raw(base, RUN_PATH, engine=EngineConfig(chunked_prefill=True, max_num_seqs=32))
    assert raw["policy"] == {"name": "chunked", "max_num_seqs": 32, "max_num_batched_tokens": 512}
    assert raw["model"] == "llama-2-7b"  # the log names no model: the scenario's stays
    assert "engine" not in raw


def test_an_eager_engine_has_no_cuda_graphs() -> None:
    raw, _ = replay_raw(base_scenario(), RUN_PATH, engine=EngineConfig(enforce_eager=True))
    assert raw["engine"]["pricing"]["cuda_graph_capture_sizes"] is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [("meta-llama/Llama-2-7b-hf", "llama-2-7b"), ("/models/Llama-2-7b-hf/", "llama-2-7b"),
     ("llama-2-7b", "llama-2-7b"), ("acme/not-a-model-9b", None),
     ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),  # its own entry, not Llama-3's
     ("meta-llama/Llama-3.1-70B-Instruct", "llama-3-70b"),
     ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
     ("openai/gpt-oss-120b", "gpt-oss-120b")],
)  # fmt: skip
def test_catalog_model(name: str, expected: str | None) -> None:
    assert catalog_model(name) == expected


def test_an_unknown_model_in_the_log_lists_the_catalog() -> None:
    with pytest.raises(ScenarioError) as info:
        replay_raw(base_scenario(), RUN_PATH, engine=EngineConfig(model="acme/mystery-9b"),
                   log_file="vllm.log")  # fmt: skip
    message = str(info.value)
    assert "vllm.log" in message and "'acme/mystery-9b'" in message and "--model" in message
    assert all(name in message for name in MODELS)
    # naming the model resolves it
    raw, _ = replay_raw(base_scenario(), RUN_PATH, engine=EngineConfig(model="acme/mystery-9b"),
                        model="llama-2-7b")  # fmt: skip
    assert raw["model"] == {"name": "llama-2-7b"}
