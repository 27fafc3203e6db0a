#!/usr/bin/env bash
# One-shot GPU measurement of table profiles for llama-2-7b and llama-3-8b in bf16, for a session
# with a datacenter GPU. Run from anywhere: `bash calibration/gpu_tables.sh`. It installs nothing:
# it needs the device's python with torch (CUDA) and this project's dependencies (numpy, pandas,
# simpy, pydantic, PyYAML, matplotlib, pyarrow, tqdm, ddsketch: `import sim` loads them), and
# uses this checkout through PYTHONPATH; it checks them first and stops before using the GPU if
# one is missing. Each model runs the `tables` grid (calibration/grid.py): an attention-free token
# sweep at 1, 2, 4 and every multiple of 8 up to 2,048 tokens, then every 128 up to 8,192 (the
# tile-size jumps of the linear layers); decode B 1..256 x L 16..8192; one-prompt prefill chunks
# of 16..8192 tokens after 0, 256, 1,024, 2,048 and 4,096 cached tokens (within the model's
# context); four mixed steps to check the composition. 4 layers built and timed, scaled to 32;
# every step in CUDA graphs; 2 warm-up and 6 timed repeats: about 460 points, well under a
# minute per model on an H100/H200 (the 109-point `full` grid took 8 s). A hard stop of 110 s
# per model keeps the whole script under 4 minutes. Points whose full-depth KV would not fit are
# skipped and listed.
# Output: calibration/profiles/measured/<model>_<gpu>/{tables.csv,tables.meta.json,table.yaml}
# (next to the `full` grid's raw.csv and profile.yaml, which it leaves alone).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python - <<'PY'
import importlib.util, sys
need = ["torch", "numpy", "pandas", "simpy", "pydantic", "yaml", "matplotlib", "pyarrow", "tqdm",
        "ddsketch"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing python modules: {', '.join(missing)} (pip install -e . from this checkout "
             "brings all but torch)")
import torch
assert torch.cuda.is_available(), "no CUDA device"
PY
gpu=$(python -c "import re, torch; \
n = torch.cuda.get_device_name(0).lower().replace('nvidia', ''); \
print(re.sub(r'[^a-z0-9]+', '-', n).strip('-'))")
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
start=$SECONDS
for model in llama-2-7b llama-3-8b; do
  out="calibration/profiles/measured/${model}_${gpu}"
  echo "== $model on $gpu -> $out/table.yaml"
  timeout 110 python -m calibration.gpu_tables --model "$model" --device cuda --dtype bf16 \
    --grid tables --out "$out"
  echo "== $model done after $((SECONDS - start)) s"
done
# the linear layers against the roofline of the same GPU
python -m calibration.compare --markdown calibration/profiles/measured/*_"${gpu}"/table.yaml || true
