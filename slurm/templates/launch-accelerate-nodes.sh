@{rendezvous}
# accelerate launch on each node with that node's rank (SLURM_NODEID, read on the node itself); the
# accelerate config's static rendezvous: node 0 hosts it at the endpoint, the others join it there
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --kill-on-bad-exit=1 \
    bash -c 'exec accelerate launch --config_file "$0" --num_processes=$(($1 * SLURM_NNODES)) \
    --num_machines="$SLURM_NNODES" --machine_rank="$SLURM_NODEID" --main_process_ip="${2%:*}" \
    --main_process_port="${2##*:}" "${@@:3}"' \
    @{accelerate_yaml} @{procs} "${rdzv_endpoint}" @{rdzv_conf}@{program}
