# Several nodes: srun starts one torchrun per node; they meet at a c10d rendezvous on the first host
# (the whole list is read: `| head -n 1` would SIGPIPE scontrol under pipefail on a long node list)
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${nodes[0]}
# Its address as Slurm itself reaches the node (NodeAddr, which is the node name where a site sets none):
# every node of the job reaches it, where a node name need not resolve on the other nodes.
head_addr=$(scontrol show node "$head_node" | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2) || head_addr=""
# The port stays below the kernel's ephemeral range (Linux default 32768-60999, where outgoing
# connections take their local ports and could already hold it): 20000 + job id mod the room below it.
read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range || { eph_lo=32768; eph_hi=60999; }
rdzv_port=$((20000 + SLURM_JOB_ID % ((eph_lo > 21024 ? eph_lo : 32768) - 20000)))
rdzv_endpoint=${head_addr:-$head_node}:${rdzv_port}
# The first node's torchrun hosts the rendezvous store, said outright (is_host): torch recognises its own
# address only among those its hostname resolves to, and NodeAddr may be another interface's.
export WORKSHOP_RDZV_HOST_FIRST=1
@{rdzv_override}
echo "[job] rendezvous ${rdzv_endpoint} (node ${head_node}; ephemeral ports ${eph_lo}-${eph_hi})"
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --kill-on-bad-exit=1 \
    bash -c 'conf=@{rdzv_conf}; [ "$WORKSHOP_RDZV_HOST_FIRST" = 1 ] && conf="is_host=$((SLURM_NODEID == 0))${conf:+,$conf}"
             exec torchrun --rdzv-conf="$conf" "$@@"' torchrun \
    --nnodes="$SLURM_NNODES" --nproc-per-node=@{procs} \
    --rdzv-backend=c10d --rdzv-endpoint="${rdzv_endpoint}" --rdzv-id="$SLURM_JOB_ID" \
    @{program}
