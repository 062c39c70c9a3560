#!/bin/bash
# @{title}
# Rendered by workshop.slurm from slurm/templates/job.sh for profile "@{profile}".
# Change the config or the profile, not this file: it is rendered again on every submission.
@{sbatch}

set -euo pipefail

# Environment (the site's setup from the profile; module and conda scripts read unset variables).
# `conda activate` needs conda's shell hook, which only interactive shells load: the first call of
# this stand-in loads it and hands over to the real conda function.
conda() { unset -f conda; eval "$(command conda shell.bash hook)" && conda "$@@"; }
set +u
@{setup}
set -u

# Caches on shared storage, logs unbuffered so the notebook sees progress as it happens
@{exports}
export PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=@{omp_threads}   # cores per process: cpus-per-task / processes per node

# Where and when
echo "[job] id ${SLURM_JOB_ID} name ${SLURM_JOB_NAME} nodes ${SLURM_NNODES}: ${SLURM_JOB_NODELIST}"
echo "[job] start $(date -Is) on $(hostname) in $(pwd)"
echo @{step_line}

# Launch
@{launch}

echo "[job] end $(date -Is)"
