#!/usr/bin/env bash
# What a GPU machine runs, with nothing but its own image (torch, triton, pytest; no network, no
# flashinfer, no install): the kernel tests with Triton compiled for the GPU (no interpreter) in
# fp32, fp16 and bf16, then the kernel microbenchmark in bf16 and fp16. Writes to ${OUT:-out}/.
# Usage: bash benchmarks/gpu_check.sh      (about 2-4 minutes on an H100/H200)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
unset TRITON_INTERPRET
# Import the repo as the package `ayo` without installing it: a tree of links mirrors setup.py's
# package_dir mapping (kernels/ -> ayo.kernels, ...).
site=$(mktemp -d)
mkdir "$site/ayo"
for f in "$PWD"/ayo/*; do ln -s "$f" "$site/ayo/"; done
for p in kernels engines scheduler; do ln -s "$PWD/$p" "$site/ayo/$p"; done
export PYTHONPATH="$site:$PWD"
"$py" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())' | tee "$out/versions.txt"
status=0
PYTHONUNBUFFERED=1 timeout 240 "$py" -m pytest tests/kernels -q -p no:cacheprovider -o addopts="" \
  --junitxml="$out/kernel-tests.xml" 2>&1 | tee "$out/kernel-tests.txt" || status=1
for dtype in bfloat16 float16; do
  PYTHONUNBUFFERED=1 timeout 150 "$py" -m benchmarks.kernels --dtype "$dtype" --json "$out/kernels-$dtype.json" \
    2>&1 | tee "$out/kernels-$dtype.txt" || status=1
done
exit $status
