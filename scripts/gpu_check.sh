#!/usr/bin/env bash
# The GPU half of meshrun in one command, for a machine with one GPU (issue 24):
#
#   scripts/gpu_check.sh                     # results in $OUT (or ./gpu-check-out), at most 480 s
#   scripts/gpu_check.sh --dry-run           # the CPU path only (what a machine without a GPU runs)
#   scripts/gpu_check.sh --help              # every option and step
#
# Run it from a fresh checkout on a machine whose python3 has torch with CUDA; nothing is
# downloaded (meshrun is imported from src/). Writes gpu_check.json (after every step),
# gpu_check.txt and gpu_check_logs.tar.gz. All of the work is in bench/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" bench/gpu_check.py "$@"
