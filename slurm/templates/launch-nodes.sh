# Several nodes: srun starts one torchrun per node; they meet at a c10d rendezvous on the first host
# (the whole list is read: `| head -n 1` would SIGPIPE scontrol under pipefail on a long node list)
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${nodes[0]}
rdzv_port=$((20000 + SLURM_JOB_ID % 20000))
echo "[job] rendezvous ${head_node}:${rdzv_port}"
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --kill-on-bad-exit=1 \
    torchrun --nnodes="$SLURM_NNODES" --nproc-per-node=@{procs} \
    --rdzv-backend=c10d --rdzv-endpoint="${head_node}:${rdzv_port}" --rdzv-id="$SLURM_JOB_ID" \
    @{program}
