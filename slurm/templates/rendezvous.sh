# Several nodes: srun starts one launcher per node; they meet at a rendezvous on the first host
# (the whole list is read: `| head -n 1` would SIGPIPE scontrol under pipefail on a long node list)
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${nodes[0]}
# Its address as Slurm itself reaches the node (NodeAddr, which is the node name where a site sets none):
# every node of the job reaches it, where a node name need not resolve on the other nodes.
head_addr=$(scontrol show node "$head_node" | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2) || head_addr=""
# The port stays below the kernel's ephemeral range (Linux default 32768-60999, where outgoing
# connections take their local ports and could already hold it): 20000 + job id mod the room below it.
# Slurm's job ids are unique on its cluster; the local backend's are counted per jobs folder (every notebook has
# a job 1), so two of its jobs at once would meet on one port: it hands each job a free one, WORKSHOP_RDZV_PORT.
read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range || { eph_lo=32768; eph_hi=60999; }
rdzv_port=${WORKSHOP_RDZV_PORT:-$((20000 + SLURM_JOB_ID % ((eph_lo > 21024 ? eph_lo : 32768) - 20000)))}
rdzv_endpoint=${head_addr:-$head_node}:${rdzv_port}
@{rdzv_override}
echo "[job] rendezvous ${rdzv_endpoint} (node ${head_node}; ephemeral ports ${eph_lo}-${eph_hi})"
