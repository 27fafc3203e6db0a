"""Defaults of the KV memory tiers below the GPU (sim/costs/memory_tiers.py): their rent per hour
for a capacity, the price override, and the orderings the figures must keep."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from sim.costs.memory_tiers import (
    HOURS_PER_MONTH,
    TIER_DEFAULTS,
    TIER_KINDS,
    TierDefaults,
    TierKind,
    tier_cost_per_hour,
    tier_defaults,
)


def test_cost_is_capacity_times_the_default_price() -> None:
    # the derivations written beside the table: AWS r7i.xlarge minus m7i.xlarge per 16 GiB, Google
    # Cloud Local SSD per GB-month, r7i.xlarge per GiB
    assert tier_cost_per_hour("dram", 16) == pytest.approx(0.2646 - 0.2016)
    assert tier_cost_per_hour("nvme", 1000) * HOURS_PER_MONTH == pytest.approx(80.0)
    assert tier_cost_per_hour("remote", 32) == pytest.approx(0.2646)
    for kind in TIER_KINDS:
        price = tier_defaults(kind).usd_per_gb_hour
        assert tier_cost_per_hour(kind, 0) == 0.0
        assert tier_cost_per_hour(kind, 3) == 3 * price
        assert tier_cost_per_hour(kind, 0.5) == 0.5 * price


def test_a_given_price_wins_over_the_default() -> None:
    assert tier_cost_per_hour("dram", 4, price_per_gb_hour=0.5) == 2.0
    assert tier_cost_per_hour("nvme", 10, 0.25) == 2.5
    assert tier_cost_per_hour("remote", 100, 0.0) == 0.0
    # None means the default, not zero
    assert tier_cost_per_hour("remote", 2, None) == tier_cost_per_hour("remote", 2) > 0


def test_unknown_kind_is_rejected_naming_the_kinds() -> None:
    for call in (
        lambda: tier_defaults("hbm"),
        lambda: tier_cost_per_hour("ssd", 10),
        lambda: tier_cost_per_hour("DRAM", 10, price_per_gb_hour=1.0),
    ):
        with pytest.raises(ValueError, match=r"unknown KV tier kind .*dram, nvme, remote"):
            call()


@pytest.mark.parametrize(
    ("capacity", "price", "field"),
    [
        (-1.0, None, "capacity_gb"),
        (math.nan, None, "capacity_gb"),
        (math.inf, None, "capacity_gb"),
        (1.0, -0.1, "price_per_gb_hour"),
        (1.0, math.nan, "price_per_gb_hour"),
    ],
)
def test_bad_capacity_or_price_is_rejected(
    capacity: float, price: float | None, field: str
) -> None:
    with pytest.raises(ValueError, match=f"nvme {field} must be a finite number >= 0"):
        tier_cost_per_hour("nvme", capacity, price)


def test_every_kind_has_positive_finite_figures() -> None:
    assert set(TIER_DEFAULTS) == set(TIER_KINDS) == set(typing.get_args(TierKind))
    for kind in TIER_KINDS:
        figures = tier_defaults(kind)
        assert isinstance(figures, TierDefaults)
        for name, value in dataclasses.asdict(figures).items():
            assert math.isfinite(value) and value > 0, (kind, name, value)
        # within sane ranges: 1-100 GB/s, at most 10 ms per transfer, under a cent per GB-hour
        for rate in (figures.read_bytes_per_s, figures.write_bytes_per_s):
            assert 1e9 <= rate <= 100e9
        assert figures.latency_s <= 10e-3 and figures.usd_per_gb_hour < 0.01


def test_defaults_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        tier_defaults("dram").latency_s = 0.0  # type: ignore[misc]


def test_tiers_trade_speed_against_price() -> None:
    dram, nvme, remote = (tier_defaults(kind) for kind in ("dram", "nvme", "remote"))
    # NVMe is cheaper per GB than DRAM, and slower in both directions and per transfer
    assert nvme.usd_per_gb_hour < dram.usd_per_gb_hour
    assert dram.read_bytes_per_s > nvme.read_bytes_per_s
    assert dram.write_bytes_per_s > nvme.write_bytes_per_s
    assert dram.latency_s < nvme.latency_s
    # a remote store's network sits between host DRAM and a local drive in bandwidth, and costs a
    # whole server's share per GB: more than the DRAM premium alone
    assert dram.read_bytes_per_s > remote.read_bytes_per_s > nvme.read_bytes_per_s
    assert remote.usd_per_gb_hour > dram.usd_per_gb_hour
