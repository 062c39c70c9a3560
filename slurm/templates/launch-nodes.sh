@{rendezvous}
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --kill-on-bad-exit=1 \
    torchrun --nnodes="$SLURM_NNODES" --nproc-per-node=@{procs} \
    --rdzv-backend=c10d --rdzv-endpoint="${rdzv_endpoint}" --rdzv-id="$SLURM_JOB_ID" @{rdzv_conf}\
    @{program}
