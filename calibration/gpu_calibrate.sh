#!/usr/bin/env bash
# One-shot GPU calibration of llama-3-8b and llama-2-7b in bf16, for a session with a datacenter
# GPU. Run from anywhere: `bash calibration/gpu_calibrate.sh`. It installs nothing: it needs the
# device's python with torch (CUDA), numpy, pydantic, PyYAML and matplotlib, and uses this
# checkout through PYTHONPATH. Each model runs the `full` grid (B 1..256, L 128..8192, prefill up
# to 8192 tokens, mixed steps) with 4 layers built and timed, scaled to 32 (recorded in each
# profile's provenance), CUDA graphs for decode, 3 warm-up and 10 timed repeats: about a minute
# per model on an H100/H200. Points whose full-depth KV would not fit are skipped and listed.
# Output: calibration/profiles/measured/<model>_<gpu>/{raw.csv,raw.meta.json,profile.yaml,fit.png}
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
gpu=$(python -c "import re, torch; assert torch.cuda.is_available(), 'no CUDA device'; \
n = torch.cuda.get_device_name(0).lower().replace('nvidia', ''); \
print(re.sub(r'[^a-z0-9]+', '-', n).strip('-'))")
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
start=$SECONDS
for model in llama-3-8b llama-2-7b; do
  out="calibration/profiles/measured/${model}_${gpu}"
  echo "== $model on $gpu -> $out"
  # a hard stop per model keeps the whole script inside the device budget even if a GPU is slow
  timeout 240 python -m sim calibrate --model "$model" --device cuda --dtype bf16 --grid full \
    --out "$out"
  echo "== $model done after $((SECONDS - start)) s"
done
# the roofline profiles of the same GPU, for the comparison in the note
python -m calibration.compare calibration/profiles/measured/*_"${gpu}"/profile.yaml || true
