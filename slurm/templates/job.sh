#!/bin/bash
# @{title}
# Rendered by workshop.slurm from slurm/templates/job.sh for profile "@{profile}".
# Change the config or the profile, not this file: it is rendered again on every submission.
@{sbatch}

set -euo pipefail

# Slurm warns of the time limit with USR1 (--signal=B:USR1@@LEAD: to this shell only). The training
# processes, on every node, look for this file at each step end: when it appears they all save a
# checkpoint of the same step and stop (resubmit with --resume to continue).
# A run that stops so leaves $WORKSHOP_STOPPED_FILE, and this script ends at once with exit
# @{checkpoint_exit} (EX_TEMPFAIL: "try again"), freeing the GPUs: the job shows as CHECKPOINTED.
export WORKSHOP_STOP_FILE="$PWD/.usr1-${SLURM_JOB_ID}"
export WORKSHOP_STOPPED_FILE="$PWD/.checkpointed-${SLURM_JOB_ID}"
usr1_at=""
trap 'usr1_at=$(date -Is); echo "[job] USR1 at ${usr1_at}: checkpoint at the end of this step, then stop"; touch "$WORKSHOP_STOP_FILE"' USR1

# Where and when, first: the notebook's display follows these lines within 2 s, and its elapsed time counts
# from this start stamp (to the millisecond) until Slurm answers; the site's setup below is part of the job.
# (A date without %N, as on BSD and macOS, prints the letter N: fall back to whole seconds.)
stamp() { local t; t=$(date +%Y-%m-%dT%H:%M:%S.%3N%:z); case $t in *N*) date -Is ;; *) printf '%s\n' "$t" ;; esac; }
echo "[job] id ${SLURM_JOB_ID} name ${SLURM_JOB_NAME} nodes ${SLURM_NNODES}: ${SLURM_JOB_NODELIST}"
echo "[job] start $(stamp) on $(hostname) in $(pwd)"
echo @{step_line}

# Environment (the site's setup from the profile; module and conda scripts read unset variables).
# CUDA: the pip wheels' own libraries win. torch's wheel brings its CUDA runtime, cuBLAS, cuDNN and
# NCCL (the nvidia-* wheels) and finds them through its RPATH; only the driver (libcuda.so) comes from
# the node. A CUDA module would put another toolkit's libraries first on LD_LIBRARY_PATH and the two
# would fight ("undefined symbol", "version `libcublasLt.so.12' not found"), so profiles load none:
# workshop refuses a `module load cuda...` setup line, and the toolkit paths are dropped below. Kept: a
# `compat` folder (e.g. /usr/local/cuda-12.4/compat), which holds the driver's forward-compatibility
# libcuda.so (the cuda-compat package) that lets an older kernel driver run the wheel's newer CUDA.
# `conda activate` needs conda's shell hook, which only interactive shells load: the first call of
# this stand-in loads it and hands over to the real conda function.
conda() { unset -f conda; eval "$(command conda shell.bash hook)" && conda "$@@"; }
set +u
@{setup}
set -u
cuda_free=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | awk '/(^|\/)compat(\/|$)/ || !/(^|\/)cuda([-_.]?[0-9][^\/]*)?(\/|$)/' | paste -sd: -) || true
if [ -n "$cuda_free" ]; then export LD_LIBRARY_PATH="$cuda_free"; else unset LD_LIBRARY_PATH; fi

# Caches on shared storage, logs unbuffered so the notebook sees progress as it happens
@{exports}
export PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=@{omp_threads}   # cores per process: cpus-per-task / processes per node

# Launch, in the background: bash runs a trap only between commands, so this shell waits instead
{
@{launch}
} &
launcher=$!
rc=0
wait "$launcher" || rc=$?
while [ "$rc" -gt 128 ] && kill -0 "$launcher" 2>/dev/null; do rc=0; wait "$launcher" || rc=$?; done
if [ "$rc" -eq 0 ] && [ -e "$WORKSHOP_STOPPED_FILE" ]; then
    # Stopped early on purpose, at a checkpoint: end now rather than hold the GPUs until the limit.
    echo "[job] stopped at a checkpoint $(stamp) (USR1 ${usr1_at:-sent to a training process}); exit @{checkpoint_exit}. Continue with: workshop submit ... --resume"
    exit @{checkpoint_exit}
fi
[ "$rc" -eq 0 ] || exit "$rc"

echo "[job] end $(stamp)"
