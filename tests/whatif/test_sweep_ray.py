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


def test_the_autoscaling_search_gives_the_same_answer_on_one_worker_two_and_ray(
    ray_session: None,
) -> None:
    """Candidates, probes and the unseen-seed check batched on each backend: the same table and
    the same answer (every summary is a seeded run's; only the order runs finish in differs)."""
    from helpers_autoscale import SHORT_DAY, SPACE

    from sim.cli.search_autoscale import answer_document
    from sim.whatif.autoscale_search import autoscale_search
    from sim.whatif.autoscale_space import AutoscaleSpace
    from sim.whatif.capacity import parse_slos

    space = AutoscaleSpace.model_validate({**SPACE, "signals": {"running": [4]}, "max": 4})
    slos = parse_slos(["ttft_p90=0.5", "tpot_p99=0.05"], 0)

    def searched(**backend: Any) -> Any:
        return autoscale_search(SHORT_DAY, space, slos, seeds=1, verify=1, **backend)

    one = searched(workers=1)
    assert one.baseline is not None and len(one.probes) >= 2 and one.verified
    for other in (searched(workers=2), searched(backend="ray", workers=2)):
        pd.testing.assert_frame_equal(other.table(), one.table())
        assert answer_document(other) == answer_document(one)
