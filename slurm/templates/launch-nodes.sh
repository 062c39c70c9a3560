# The first node's torchrun hosts the rendezvous store, said outright (is_host): torch recognises its own
# address only among those its hostname resolves to, and NodeAddr may be another interface's.
export WORKSHOP_RDZV_HOST_FIRST=1
@{rendezvous}
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --kill-on-bad-exit=1 \
    bash -c 'conf=@{rdzv_conf}; [ "$WORKSHOP_RDZV_HOST_FIRST" = 1 ] && conf="is_host=$((SLURM_NODEID == 0))${conf:+,$conf}"
             exec torchrun --rdzv-conf="$conf" "$@@"' torchrun \
    --nnodes="$SLURM_NNODES" --nproc-per-node=@{procs} \
    --rdzv-backend=c10d --rdzv-endpoint="${rdzv_endpoint}" --rdzv-id="$SLURM_JOB_ID" \
    @{program}
