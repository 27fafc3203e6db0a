"""The fidelity check: batchsim against a real measured run, in CI.

`calibration/measured/vllm-0.11-h100-llama-2-7b/` holds a real vLLM 0.11 run (Llama-2-7B on an
H100; its README has the source and licence). This module replays it through
`scenarios/measured/vllm-0.11_h100_llama-2-7b.yaml` (both variants: the step-cost profile alone,
and with the fitted engine preset `vllm-0.11_h100-sxm`; and the same scenario without its
`profile` key, `default_step_model`: what a user gets by default) with the engine's log, and
returns the signed errors of p50 and p90 of TTFT, TPOT and E2E and the median per-request E2E
error, in percent. `expected_errors.json` beside the run records them;
`tests/calibration/test_fidelity.py` fails when any moves by more than one percentage point.
After an intended change:

    python -m calibration.fidelity --write     # rerun and record the errors
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# the repository's root: this file's when run from a checkout; an installed copy (the data and
# scenarios are not installed) is given the checkout's root by its caller
ROOT = Path(__file__).resolve().parent.parent
RUN_FOLDER = Path("calibration") / "measured" / "vllm-0.11-h100-llama-2-7b"
SCENARIO_FILE = Path("scenarios") / "measured" / "vllm-0.11_h100_llama-2-7b.yaml"
RUN = ROOT / RUN_FOLDER
SCENARIO = ROOT / SCENARIO_FILE
EXPECTED = RUN / "expected_errors.json"
TOLERANCE_PP = 1.0  # percentage points an error may move before the check fails
DEFAULT_MODEL = "default_step_model"  # the scenario without its profile key


def fidelity_errors(root: Path = ROOT) -> dict[str, dict[str, float | None]]:
    """Per variant: the headline errors of the replay of the committed run, in percent
    (`root`: the repository checkout holding the run and its scenario)."""
    from sim.measured import read_measured, read_vllm_log
    from sim.scenario.load import read_scenario
    from sim.whatif.calibrate_engine import headline
    from sim.whatif.replay import load_replay, replay, replay_raw

    folder, scenario_file = root / RUN_FOLDER, root / SCENARIO_FILE
    run = read_measured(folder / "traces.json")
    engine = read_vllm_log(folder / "vllm.log")
    base = read_scenario(scenario_file)
    # the scenario's variants, and the default step model: the scenario as a user writes it
    # without a profile (counted events, fitted on published deployments, never on this run)
    default = {k: v for k, v in base.items() if k not in ("profile", "variants")}
    default["variants"] = {DEFAULT_MODEL: {}}
    out: dict[str, dict[str, float | None]] = {}
    for source in (base, default):
        raw, notes = replay_raw(
            source,
            folder / "traces.json",
            engine=engine,
            log_file=str(folder / "vllm.log"),
        )
        scenario = load_replay(raw, str(scenario_file), scenario_file.parent)
        result = replay(scenario, run, notes)
        out |= {name: headline(c) for name, c in result.comparisons.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the errors as expected")
    args = parser.parse_args(argv)
    errors = fidelity_errors()
    doc: dict[str, Any] = {
        "run": "calibration/measured/vllm-0.11-h100-llama-2-7b",
        "scenario": "scenarios/measured/vllm-0.11_h100_llama-2-7b.yaml",
        "tolerance_pp": TOLERANCE_PP,
        "errors_pct": errors,
    }
    text = json.dumps(doc, indent=2) + "\n"
    if args.write:
        EXPECTED.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
