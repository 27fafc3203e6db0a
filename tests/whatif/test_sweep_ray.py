"""The Ray backend gives the very table (of a sweep, of a deployment search) the local backend
gives (Ray on a local 2-CPU cluster).

Ray starts slowly (seconds), so one module-scoped session serves every test here; the sweep
reuses an initialized session and leaves it running, which the fixture then shuts down.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from scenario_factory import lognormal, poisson, scenario

from sim.whatif.sweep import sweep

ray = pytest.importorskip("ray")

SCENARIO: dict[str, Any] = scenario(
    name="raytest",
    seed=2,
    workload=poisson(300, 6.0, lognormal(200, 0.5, max=1024), lognormal(40, 0.5, max=256)),
    profile=None,
    variants={"prefill_first": {}, "mixed": {"policy": {"mode": "mixed"}}},
)
GRID = {"policy.max_num_seqs": [4, 64], "workload.arrival.rate": [3.0, 12.0]}


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_and_local_backends_give_identical_tables(ray_session: None, tmp_path: Path) -> None:
    path = tmp_path / "raytest.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    on_ray = sweep(path, GRID, backend="ray", workers=2, out=tmp_path / "ray")
    local = sweep(path, GRID, backend="local", workers=1)
    assert len(on_ray) == 8
    key = ["point_id", "variant"]
    pd.testing.assert_frame_equal(
        on_ray.sort_values(key, ignore_index=True), local.sort_values(key, ignore_index=True)
    )
    # and not merely sorted alike: rows come in grid order whatever finishes first
    pd.testing.assert_frame_equal(on_ray, local)
    assert len(list((tmp_path / "ray" / "points").glob("*.json"))) == 4


def test_a_deployment_search_gives_the_same_answer_on_ray_and_local_processes(
    ray_session: None, tmp_path: Path
) -> None:
    from helpers_search import HAND_SLO, hand_scenario, hand_space

    from sim.whatif.search import search

    slos = [HAND_SLO]
    on_ray = search(hand_scenario(), hand_space(), slos, backend="ray", workers=2, out=tmp_path)
    pool = search(hand_scenario(), hand_space(), slos, backend="local", workers=2)
    inline = search(hand_scenario(), hand_space(), slos, backend="local", workers=1)
    assert on_ray.question["backend"] == "ray" and on_ray.best is not None
    assert on_ray.best["instances"] == 3
    for other in (pool, inline):
        pd.testing.assert_frame_equal(on_ray.table, other.table)
        assert on_ray.counts == other.counts
    assert len(list((tmp_path / "configs").glob("*.json"))) == 5 + 4
