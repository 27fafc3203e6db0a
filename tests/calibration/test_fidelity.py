"""batchsim against a real engine: the committed vLLM 0.11 run on an H100, replayed in CI.

`calibration/fidelity.py` replays the run (calibration/measured/vllm-0.11-h100-llama-2-7b) with
its engine log through both variants of its scenario; every headline error must stay within one
percentage point of the value recorded in `expected_errors.json` (rerun `python -m
calibration.fidelity --write` after an intended change, and say why in the commit). The
calibrated variant must also meet the project's accuracy target on this run: every p50 and p90 of
TTFT, TPOT and E2E within 5 % of the measurement, and the median per-request E2E error under 5 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.fidelity import RUN_FOLDER, TOLERANCE_PP, fidelity_errors

# the checkout under test (the installed package of a compiled build holds no data)
ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / RUN_FOLDER / "expected_errors.json"


@pytest.fixture(scope="module")
def errors() -> dict[str, dict[str, float | None]]:
    return fidelity_errors(ROOT)


def test_every_error_stays_within_a_point_of_its_record(errors: dict) -> None:
    recorded = json.loads(EXPECTED.read_text(encoding="utf-8"))["errors_pct"]
    assert set(errors) == set(recorded)
    moved = []
    for variant, cells in recorded.items():
        assert set(errors[variant]) == set(cells)
        for key, old in cells.items():
            new = errors[variant][key]
            assert new is not None and old is not None, (variant, key)
            if abs(new - old) > TOLERANCE_PP:
                moved.append(f"{variant} {key}: {old:+.2f} -> {new:+.2f}")
    assert not moved, "fidelity moved (python -m calibration.fidelity --write): " + "; ".join(moved)


def test_the_calibrated_preset_meets_the_accuracy_target(errors: dict) -> None:
    calibrated = errors["calibrated"]
    for key, value in calibrated.items():
        assert value is not None
        if key == "e2e_median_ape_pct":
            assert 0 <= value < 5.0
        else:
            assert abs(value) < 5.0, key


def test_the_profile_alone_is_worse_than_calibrated(errors: dict) -> None:
    """The fitted terms earn their place: the profile alone misses by more (worst cell)."""
    worst = {v: max(abs(x) for x in cells.values() if x is not None) for v, cells in errors.items()}
    assert worst["calibrated"] < worst["profile_only"]
