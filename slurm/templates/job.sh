#!/bin/bash
# @{title}
# Rendered by workshop.slurm from slurm/templates/job.sh for profile "@{profile}".
# Change the config or the profile, not this file: it is rendered again on every submission.
@{sbatch}

set -euo pipefail

# Slurm warns of the time limit with USR1 (--signal=B:USR1@@LEAD: to this shell only). The training
# processes, on every node, look for this file at each step end: when it appears they all save a
# checkpoint of the same step and stop (resubmit with --resume to continue).
export WORKSHOP_STOP_FILE="$PWD/.usr1-${SLURM_JOB_ID}"
usr1_at=""
trap 'usr1_at=$(date -Is); echo "[job] USR1 at ${usr1_at}: checkpoint at the end of this step, then stop"; touch "$WORKSHOP_STOP_FILE"' USR1

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

# Launch, in the background: bash runs a trap only between commands, so this shell waits instead
{
@{launch}
} &
launcher=$!
rc=0
wait "$launcher" || rc=$?
while [ "$rc" -gt 128 ] && kill -0 "$launcher" 2>/dev/null; do rc=0; wait "$launcher" || rc=$?; done
if [ "$rc" -eq 0 ] && [ -n "$usr1_at" ]; then
    # Stopped early on purpose: let the time limit end the job, so Slurm records TIMEOUT, not COMPLETED.
    echo "[job] stopped at a checkpoint; waiting for the time limit. Continue with: workshop submit ... --resume"
    for _ in $(seq 1 @{limit_wait_s}); do sleep 1; done
    echo "[job] the time limit did not come within @{limit_wait_s} s: ending as stopped"
    exit 3
fi
[ "$rc" -eq 0 ] || exit "$rc"

echo "[job] end $(date -Is)"
