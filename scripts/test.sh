#!/usr/bin/env bash
# Run the whole test suite. As root, the Slurm test cluster (tests/slurm/cluster.sh) is brought up
# by the tests themselves; elsewhere the Slurm tests say why they cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@"
