#!/usr/bin/env bash
# Register the course's Jupyter kernel "FSDP workshop (bloom_env)" for this user, pointing at the
# python of the active environment (run it with bloom_env activated), with the site profile's
# HF_HOME / WANDB_MODE / WORKSHOP_PROFILE in the kernelspec. Safe to run again: it replaces the spec.
#   conda env create -f bloom_env.yml
#   conda run -n bloom_env bash scripts/register_kernel.sh --profile example-hpc
# Options: --profile NAME|FILE.toml (default $WORKSHOP_PROFILE), --prefix DIR (instead of --user).
set -euo pipefail
PY=${PYTHON:-python}
exec "$PY" -m workshop.student.kernel "$@"
