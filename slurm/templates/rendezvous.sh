# Several nodes: srun starts one launcher per node; they meet at a rendezvous on the first host
# (the whole list is read: `| head -n 1` would SIGPIPE scontrol under pipefail on a long node list)
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head_node=${nodes[0]}
# The port stays below the kernel's ephemeral range (Linux default 32768-60999, where outgoing
# connections take their local ports and could already hold it): 20000 + job id mod the room below it.
read -r eph_lo eph_hi < /proc/sys/net/ipv4/ip_local_port_range || { eph_lo=32768; eph_hi=60999; }
rdzv_port=$((20000 + SLURM_JOB_ID % ((eph_lo > 21024 ? eph_lo : 32768) - 20000)))
rdzv_endpoint=${head_node}:${rdzv_port}
@{rdzv_override}
echo "[job] rendezvous ${rdzv_endpoint} (ephemeral ports ${eph_lo}-${eph_hi})"
