"""Measure table profiles on a GPU: the `tables` grid, then a table profile from it, no fit.

For one model: probe the device, time every point of the grid (`calibration.grid`: a dense
attention-free token sweep for the linear layers, decode batch x context and prefill chunk x
prefix grids, a few mixed steps to check the composition) with the benchmark of `batchsim
calibrate` (`calibration.bench`), write `<out>/tables.csv` and `tables.meta.json`, and turn them
into `<out>/table.yaml` (`calibration.table_from_raw`). `calibration/gpu_tables.sh` runs it for
llama-2-7b and llama-3-8b on a CUDA GPU; on a CPU the `tiny-tables` grid and the
`llama-tiny-test` model check the whole path in seconds.

    python -m calibration.gpu_tables --model llama-2-7b --out calibration/profiles/measured/x
        [--device cuda] [--dtype bf16] [--grid tables] [--layers 4] [--repeats 6]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from calibration.calibrate import benchmark
from calibration.grid import preset
from calibration.table_from_raw import TableOutcome, format_table_outcome, table_from_raw
from sim.costs.catalog import MODELS

RAW_FILE = "tables.csv"
PROFILE_FILE = "table.yaml"


def run_tables(
    model: str,
    device: str,
    dtype: str,
    out_dir: Path,
    *,
    grid_name: str = "tables",
    layers: int | None = None,
    repeats: int | None = None,
) -> TableOutcome:
    """Time the grid on the device and write the raw CSV and the table profile into out_dir."""
    catalog = MODELS.get(model)
    grid = preset(
        grid_name,
        layers_timed=layers,
        repeats=repeats,
        # a prompt chunk never ends beyond the model's context
        max_context=catalog.max_model_len if catalog is not None else None,
    )
    raw = out_dir / RAW_FILE
    started = time.perf_counter()
    benchmark(model, device, dtype, grid, raw)
    print(f"{model}: {len(grid.points())} points in {time.perf_counter() - started:.1f} s")
    return table_from_raw(
        raw,
        out_dir,
        name=f"{out_dir.name}-table",
        model=model if catalog is not None else None,
        file_name=PROFILE_FILE,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure a table profile on this device.")
    parser.add_argument("--model", required=True, help="catalog model, or llama-tiny-test")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--grid", choices=("tables", "tiny-tables"), default="tables")
    parser.add_argument("--layers", type=int, help="layers to build and time (scaled to depth)")
    parser.add_argument("--repeats", type=int, help="timed repeats per point")
    args = parser.parse_args(argv)
    outcome = run_tables(
        args.model,
        args.device,
        args.dtype,
        args.out,
        grid_name=args.grid,
        layers=args.layers,
        repeats=args.repeats,
    )
    print(format_table_outcome(outcome))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
