"""The Python API in a notebook: scenarios as mappings, paths or loaded sets, short reprs, the
side-by-side table, and an `import sim` that loads nothing heavy."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fuzz_corpus import BASE

import sim
from sim.cli.main import main
from sim.compiled import build

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "numpy", "matplotlib", "pyarrow", "simpy", "pydantic", "yaml", "scipy")


def python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return done.stdout.strip()


def test_import_sim_loads_nothing_heavy() -> None:
    loaded = python(f"import sys, sim; print([m for m in {HEAVY!r} if m in sys.modules])")
    assert loaded == "[]"


def test_building_the_command_line_loads_no_tables_or_plots() -> None:
    code = (
        "import sys; from sim.cli.main import _parser; _parser(); "
        "print([m for m in ('pandas', 'matplotlib', 'pyarrow') if m in sys.modules])"
    )
    assert python(code) == "[]"


def test_sim_simulate_stays_the_function_after_its_module_is_imported() -> None:
    import sim.simulate

    assert callable(sim.simulate) and sim.simulate.__module__ == "sim.simulate"
    assert sorted(sim.__all__) == sim.__all__ and set(sim.__all__) <= set(dir(sim))
    with pytest.raises(AttributeError):
        _ = sim.no_such_name  # type: ignore[attr-defined]


def test_simulate_takes_a_mapping_a_path_or_a_loaded_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    loaded = sim.load_scenario(path)
    tables = [sim.simulate(source).summary() for source in (BASE, path, str(path), loaded)]
    for other in tables[1:]:
        pd.testing.assert_frame_equal(tables[0], other)
    changed = sim.simulate(loaded, overrides=["workload.num_requests=7"])
    assert changed.summary()["num_requests"].tolist() == [7, 7]


def test_sweep_and_capacity_search_take_a_mapping() -> None:
    table = sim.sweep(BASE, {"policy.max_num_seqs": [2, 8]}, workers=1)
    assert len(table) == 4 and set(table["variant"]) == {"a", "b"}
    raw = {k: v for k, v in BASE.items() if k != "variants"}
    capacity = sim.capacity_search(raw, ["ttft_p90=5"], tolerance=0.2, repeats=0)
    assert list(capacity.index) == ["default"] and capacity["capacity_rps"].iloc[0] > 0


def test_results_show_briefly_and_as_a_side_by_side_table() -> None:
    results = sim.simulate(BASE)
    text = repr(results)
    assert text == "Results('fuzz': 2 variants [a, b], 20 requests each)"
    assert repr(results["a"]).startswith("VariantResult('a': 20 requests, ")
    table = results.side_by_side()
    assert list(table.columns) == ["a", "b"] and table.index.name == "metric"
    summary = results.summary()
    assert table.loc["TTFT p50 ms", "a"] == pytest.approx(summary.loc["a", "ttft_p50_s"] * 1e3)
    assert table.loc["requests finished", "b"] == summary.loc["b", "num_finished"]
    page = results._repr_html_()
    assert '<table class="summary">' in page and "<th>a</th><th>b</th>" in page
    assert "<td>TTFT p50 ms</td>" in page


def test_rejections_are_counted_by_cause() -> None:
    lengths = {"dist": "uniform", "low": 3000, "high": 5000}
    raw = {
        **BASE,
        "workload": {**BASE["workload"], "prompt_tokens": lengths},
        "policy": {**BASE["policy"], "max_num_batched_tokens": 8192},
    }
    results = sim.simulate(raw)
    table = results.rejections()
    assert list(table.columns) == ["variant", "cause", "count"]
    requests = results["a"].requests
    too_long = int((requests["num_prompt_tokens"] + requests["max_output_tokens"] > 4096).sum())
    assert 0 < too_long < len(requests)
    causes = table[table["variant"] == "a"].set_index("cause")["count"].to_dict()
    assert causes == {"longer than max_model_len (4096 tokens)": too_long}
    assert sim.simulate(BASE).rejections().empty


def test_version_license_and_typing_marker(capsys: pytest.CaptureFixture[str]) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    assert main(["--version"]) == 0
    version = importlib.metadata.version("batchsim")
    assert version == sim.__version__
    assert capsys.readouterr().out.strip() == f"batchsim {version} ({build()} core)"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    # the typing marker, the shipped engine presets, the events profile's unit costs and the
    # catalog's model configs travel with the package
    assert project["tool"]["setuptools"]["package-data"]["sim"] == [
        "py.typed",
        "scenario/presets/*.yaml",
        "costs/unit_costs.yaml",
        "costs/configs/*.json",
    ]
    assert (ROOT / "sim" / "py.typed").is_file()
    notebooks = project["project"]["optional-dependencies"]["notebooks"]
    assert any(dep.startswith("jupyterlab") for dep in notebooks)
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e '.[notebooks]' && .venv/bin/jupyter lab notebooks/" in readme
