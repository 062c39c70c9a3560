#!/usr/bin/env bash
# Throwaway two-node Slurm cluster on this machine, for the workshop's tests.
#
#   tests/slurm/cluster.sh up            install Slurm if missing, start the cluster (idempotent)
#   tests/slurm/cluster.sh down [--purge] stop what `up` started (only recorded pids)
#   tests/slurm/cluster.sh status        sinfo + which recorded daemons are alive; rc 0 if up
#   tests/slurm/cluster.sh env           `export VAR=...` lines for Slurm client commands
#
# Everything lives under one directory ($WORKSHOP_SLURM_DIR, default /tmp/workshop-slurm):
#   etc/    slurm.conf gres.conf slurmdbd.conf      munge/  key, socket, log
#   state/  slurmctld state      spool/  slurmd spools   log/  all daemon logs
#   pids/   "PID COMM" of every daemon this script started
#   gpu/    fake GPU device files (symlinks to /dev/null)   mysql/  MariaDB data dir
#   shared/ mode 1777, for job output (writable by every user, e.g. `student`)
#   seal/   root 0755: the root seal (slurm/admin/seal-epilog.sh, this cluster's Epilog) writes <job>.sha256
#
# Nodes n1, n2 both run on 127.0.0.1 (Slurm's MULTIPLE_SLURMD), each slurmd in its own UTS
# namespace so `srun hostname` prints n1 / n2. Each node advertises 4 CPUs, 8 GiB and 2 fake
# GPUs. Every daemon listens on loopback only (CommunicationParameters=NoInAddrAny, MariaDB
# with --skip-networking, munge over a unix socket).
#
# Accounting: slurmdbd + MariaDB (default; full `sacct -P`). Set
# WORKSHOP_SLURM_ACCOUNTING=filetxt for the lighter jobcomp/filetxt (`sacct -c`) instead.
set -euo pipefail

DIR=$(realpath -m "${WORKSHOP_SLURM_DIR:-/tmp/workshop-slurm}")   # absolute: the daemons start in /
# accounting mode: env var, else what the last `up` of this state dir used, else slurmdbd
ACCOUNTING=${WORKSHOP_SLURM_ACCOUNTING:-$(cat "$DIR/accounting" 2>/dev/null || echo slurmdbd)}
CLUSTER=workshop
NODES=(n1 n2)
CTLD_PORT=16817
DBD_PORT=16819
NODE_PORT_BASE=17000          # n1 -> 17001, n2 -> 17002
CPUS=4
REAL_MEM=8192                 # MiB per node; jobs may ask --mem=4G
GPUS=2
STUDENT=student
MARK="# WORKSHOP-SLURM-MANAGED: written by tests/slurm/cluster.sh; safe to delete."
SYSTEM_CONF=/etc/slurm/slurm.conf
CONF=$DIR/etc/slurm.conf
MUNGE_SOCKET=$DIR/munge/munge.socket
SEAL_DIR=$DIR/seal            # the root seal's records (docs/instructor.md, "The root seal")
SEAL_EPILOG=$(dirname "$(realpath "${BASH_SOURCE[0]}")")/../../slurm/admin/seal-epilog.sh
MYSQL_SOCKET=$DIR/mysql/mysqld.sock
WAIT_S=${WORKSHOP_SLURM_WAIT_S:-60}

case "$ACCOUNTING" in slurmdbd|filetxt) ;; *)
  echo "WORKSHOP_SLURM_ACCOUNTING must be slurmdbd or filetxt, not '$ACCOUNTING'" >&2; exit 2;;
esac

log() { printf '[cluster.sh] %s\n' "$*" >&2; }

die() {
  log "ERROR: $*"
  local f
  for f in "$DIR"/log/*.log "$DIR"/log/*.out; do
    [[ -s $f ]] || continue
    printf '\n----- tail of %s -----\n' "$f" >&2
    tail -n 25 "$f" >&2 || true
  done
  exit 1
}

# Slurm client commands against this cluster, never hanging for long.
sl() { SLURM_CONF=$CONF timeout 15 "$@"; }

# ---------------------------------------------------------------- pid records
daemons() {  # in start order
  echo munged
  if [[ $ACCOUNTING == slurmdbd ]]; then echo mariadbd; echo slurmdbd; fi
  echo slurmctld
  local n; for n in "${NODES[@]}"; do echo "slurmd-$n"; done
}

# alive NAME: the recorded pid exists and still runs the program we started.
alive() {
  local f=$DIR/pids/$1.pid pid comm
  [[ -r $f ]] || return 1
  read -r pid comm <"$f" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  local stat
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ ${stat##*) } != Z* ]] || return 1   # a zombie nobody reaped yet is dead too
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]]
}

# close_fds: close every file descriptor above 2 of this (sub)shell. A daemon must inherit none: a caller's
# `flock /tmp/slurm-cluster.lock ...` holds its lock on an open descriptor, and a daemon started under it
# would hold that lock for as long as it runs, so every later `flock` on it would wait forever.
close_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    if ((fd > 2)); then eval "exec ${fd}>&-" 2>/dev/null || true; fi
  done
}

# start NAME COMM CMD...: run CMD in the foreground of a new session, in the background of us,
# with no inherited file descriptors (so callers capturing our output are not held open, and no
# caller's lock is held by a daemon).
start() {
  local name=$1 comm=$2; shift 2
  # from /, as daemons do: one started in the caller's folder runs every job step there, and once that
  # folder is deleted (a CI clone made again) each step prints "Unable to get current working directory"
  (close_fds; cd / && exec setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1) &
  local pid=$!
  echo "$pid $comm" >"$DIR/pids/$name.pid"
  # wait for the exec chain (setsid/setpriv/unshare/sh) to reach the daemon itself
  local i
  for i in $(seq 100); do
    alive "$name" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  alive "$name" || die "$name (pid $pid) did not start"
}

# wait_for NAME SECONDS CMD...: poll CMD until it succeeds, while daemon NAME stays alive.
wait_for() {
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    alive "$what" || die "$what died during start-up"
    ((SECONDS < end)) || die "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}

stop_recorded() {
  local name pid comm f i
  for name in $(daemons | tac); do
    f=$DIR/pids/$name.pid
    [[ -e $f ]] || continue
    if alive "$name"; then
      read -r pid comm <"$f"
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 100); do alive "$name" || break; sleep 0.1; done
      if alive "$name"; then log "$name ignored SIGTERM; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$f"
  done
}

# ---------------------------------------------------------------- install
need_root() { [[ $(id -u) == 0 ]] || die "'$1' needs root (run: sudo $0 $1)"; }

apt_install() {
  local out=$DIR/log/apt-install.log rc=0 policy_made=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then   # keep package scripts from starting services
    printf '#!/bin/sh\n# %s\nexit 101\n' "$MARK" >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d; policy_made=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends
             -o DPkg::Lock::Timeout=300 "$@")
  log "installing: $*"
  "${apt[@]}" >"$out" 2>&1 || rc=$?
  if ((rc != 0)) && grep -qE 'Unable to locate package|has no installation candidate|Failed to fetch|404' "$out"; then
    log "package lists missing or stale: apt-get update"
    apt-get update -o DPkg::Lock::Timeout=300 >>"$out" 2>&1 || true
    rc=0; "${apt[@]}" >>"$out" 2>&1 || rc=$?
  fi
  ((policy_made)) && rm -f /usr/sbin/policy-rc.d
  ((rc == 0)) || { tail -n 30 "$out" >&2; die "apt-get install failed (log: $out)"; }
}

ensure_installed() {
  local pkgs=()
  command -v slurmctld >/dev/null || pkgs+=(slurmctld)
  command -v slurmd >/dev/null || pkgs+=(slurmd)
  command -v sbatch >/dev/null || pkgs+=(slurm-client)
  command -v munged >/dev/null || pkgs+=(munge)
  if [[ $ACCOUNTING == slurmdbd ]]; then
    command -v slurmdbd >/dev/null || pkgs+=(slurmdbd)
    command -v mariadbd >/dev/null || pkgs+=(mariadb-server)
  fi
  ((${#pkgs[@]} == 0)) || apt_install "${pkgs[@]}"
}

# ---------------------------------------------------------------- configuration
write_if_changed() {  # write_if_changed FILE MODE < content
  local f=$1 mode=$2 tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [[ -e $f ]] && cmp -s "$tmp" "$f"; then rm -f "$tmp"; else mv -f "$tmp" "$f"; fi
}

slurm_conf() {
  local n i=0
  cat <<EOF
$MARK
# State directory: $DIR
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
# bind to what the host name resolves to (127.0.0.1), not to every interface
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
PrologFlags=Alloc
# the root seal: at each job's end, root records the SHA-256 of its log and results in $SEAL_DIR
Epilog=$DIR/etc/epilog.sh
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
ReturnToService=2
SlurmctldTimeout=60
SlurmdTimeout=300
InactiveLimit=0
MessageTimeout=10
MinJobAge=300
# time limits: no grace, quick kill (Slurm still checks limits only every ~30 s)
OverTimeLimit=0
KillWait=2
Waittime=0
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
EnforcePartLimits=ALL
GresTypes=gpu
SlurmdParameters=config_overrides
EOF
  if [[ $ACCOUNTING == slurmdbd ]]; then
    cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# for slurmdbd connections this names the munge socket (AuthInfo is not used for them)
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
EOF
  else
    cat <<EOF
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
EOF
  fi
  for n in "${NODES[@]}"; do
    i=$((i + 1))
    echo "NodeName=$n NodeHostname=$n NodeAddr=127.0.0.1 Port=$((NODE_PORT_BASE + i)) CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$REAL_MEM Gres=gpu:$GPUS State=UNKNOWN"
  done
  local IFS=,
  echo "PartitionName=debug Nodes=${NODES[*]} Default=YES MaxTime=30 State=UP"
}

gres_conf() {
  local n
  echo "$MARK"
  echo "AutoDetect=off"
  for n in "${NODES[@]}"; do
    echo "NodeName=$n Name=gpu File=$DIR/gpu/$n/nvidia[0-$((GPUS - 1))]"
  done
}

slurmdbd_conf() {
  cat <<EOF
$MARK
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
CommunicationParameters=NoInAddrAny
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=workshop
StorageLoc=slurm_acct_db
EOF
}

# The course's root seal as this cluster's Epilog: the repository's script, and a wrapper that names
# this cluster's seal folder and configuration (slurm.conf's Epilog= takes a path, no arguments).
seal_epilog() {
  install -d -m 0755 -o root -g root "$SEAL_DIR"
  write_if_changed "$DIR/etc/seal-epilog.sh" 0755 <"$SEAL_EPILOG"
  printf '#!/bin/sh\n%s\nWORKSHOP_SEAL_DIR=%q SLURM_CONF=%q exec /bin/sh %q\n' "$MARK" "$SEAL_DIR" "$CONF" \
    "$DIR/etc/seal-epilog.sh" | write_if_changed "$DIR/etc/epilog.sh" 0755
}

prepare_dirs() {
  install -d -m 0755 "$DIR" "$DIR/etc" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/pids" "$DIR/run" "$DIR/gpu"
  install -d -m 1777 "$DIR/shared"
  local n i
  for n in "${NODES[@]}"; do
    install -d -m 0755 "$DIR/gpu/$n" "$DIR/spool/slurmd-$n"
    for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$DIR/gpu/$n/nvidia$i"; done
  done
  # munge: key + socket dir owned by the munge user
  install -d -m 0755 -o munge -g munge "$DIR/munge"
  if [[ ! -s $DIR/munge/munge.key ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  fi
  chown munge:munge "$DIR/munge/munge.key"; chmod 0400 "$DIR/munge/munge.key"

  echo "$ACCOUNTING" >"$DIR/accounting"
  slurm_conf | write_if_changed "$CONF" 0644
  gres_conf | write_if_changed "$DIR/etc/gres.conf" 0644
  seal_epilog
  if [[ $ACCOUNTING == slurmdbd ]]; then
    slurmdbd_conf | write_if_changed "$DIR/etc/slurmdbd.conf" 0600
  else
    touch "$DIR/log/jobcomp.txt"; chmod 0666 "$DIR/log/jobcomp.txt"
  fi

  # /etc/slurm/slurm.conf lets plain `sbatch` work for every user, but only ever overwrite
  # a file this script wrote.
  if [[ ! -e $SYSTEM_CONF ]] || grep -qF "$MARK" "$SYSTEM_CONF"; then
    install -d -m 0755 /etc/slurm
    write_if_changed "$SYSTEM_CONF" 0644 <"$CONF"
  else
    log "note: $SYSTEM_CONF exists and is not ours; use SLURM_CONF=$CONF (see: $0 env)"
  fi

  # node names resolve to loopback
  local missing=()
  for n in "${NODES[@]}"; do getent hosts "$n" >/dev/null 2>&1 || missing+=("$n"); done
  if ((${#missing[@]})) && ! grep -qE "^127\.0\.0\.1[[:space:]]+${NODES[0]}([[:space:]]|$)" /etc/hosts; then
    echo "127.0.0.1 ${NODES[*]}" >>/etc/hosts
  fi
  for n in "${NODES[@]}"; do
    [[ $(getent hosts "$n" | awk '{print $1; exit}') == 127.0.0.1 ]] \
      || die "$n does not resolve to 127.0.0.1; fix /etc/hosts"
  done

  id -u "$STUDENT" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$STUDENT"
}

# ---------------------------------------------------------------- daemons
munge_ok() { munge -S "$MUNGE_SOCKET" -n </dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null; }
mysql_ok() { mariadb-admin --no-defaults --socket="$MYSQL_SOCKET" -u root ping; }
dbd_ok() { sl sacctmgr -n -P show cluster format=cluster; }
ctld_ok() { sl scontrol ping | grep -q 'is UP'; }

start_munged() {
  alive munged && return 0
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  start munged munged setpriv --reuid=munge --regid=munge --init-groups \
    munged --foreground --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCKET" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  wait_for munged 20 munge_ok
}

start_mariadb() {
  alive mariadbd && return 0
  if [[ ! -d $DIR/mysql/mysql ]]; then
    log "initialising MariaDB in $DIR/mysql"
    install -d -m 0755 -o mysql -g mysql "$DIR/mysql"
    mariadb-install-db --no-defaults --user=mysql --datadir="$DIR/mysql" \
      --auth-root-authentication-method=socket --skip-test-db \
      >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed"
  fi
  rm -f "$MYSQL_SOCKET"
  touch "$DIR/log/mariadb.log"; chown mysql:mysql "$DIR/log/mariadb.log"
  start mariadbd mariadbd mariadbd --no-defaults --user=mysql --datadir="$DIR/mysql" \
    --socket="$MYSQL_SOCKET" --skip-networking --pid-file="$DIR/mysql/mariadbd.pid" \
    --log-error="$DIR/log/mariadb.log" --skip-log-bin --innodb-buffer-pool-size=64M \
    --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=2 --innodb-lock-wait-timeout=900
  wait_for mariadbd 60 mysql_ok
  mariadb --no-defaults --socket="$MYSQL_SOCKET" -u root -e "
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'workshop';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "creating the MariaDB user failed"
}

start_slurmdbd() {
  alive slurmdbd && return 0
  start slurmdbd slurmdbd env SLURM_CONF="$CONF" MYSQL_UNIX_PORT="$MYSQL_SOCKET" slurmdbd -D
  wait_for slurmdbd 60 dbd_ok
  # register cluster, account and users (idempotent)
  if ! sl sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
    sl sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
  if ! sl sacctmgr -n -P show account format=account | grep -qx "$CLUSTER"; then
    sl sacctmgr -i add account "$CLUSTER" cluster="$CLUSTER" description=workshop organization=workshop >/dev/null
  fi
  local u
  for u in root "$STUDENT"; do
    if ! sl sacctmgr -n -P show assoc where user="$u" account="$CLUSTER" format=user | grep -qx "$u"; then
      sl sacctmgr -i add user "$u" account="$CLUSTER" cluster="$CLUSTER" >/dev/null
    fi
  done
}

start_slurmctld() {
  alive slurmctld && return 0
  # -c: a cold start forgets the jobs saved in $DIR/state. They belong to an earlier boot (a run killed
  # mid-way, a machine image taken with the cluster up); recovered, they hold slots and GPUs no test asked for.
  start slurmctld slurmctld env SLURM_CONF="$CONF" slurmctld -D -c
  wait_for slurmctld 30 ctld_ok
}

start_slurmd() {
  local n=$1
  alive "slurmd-$n" && return 0
  start "slurmd-$n" slurmd env SLURM_CONF="$CONF" \
    unshare --uts sh -c 'hostname "$0" && exec slurmd -D -N "$0"' "$n"
}

# nodes_ready: every node answers and none is down/drained/unknown.
nodes_ready() {
  local out n st
  out=$(sl sinfo -h -N -p debug -o '%N %t') || return 1
  for n in "${NODES[@]}"; do
    st=$(awk -v n="$n" '$1 == n {print $2}' <<<"$out")
    case "$st" in idle|mix|alloc|comp) ;; *) return 1;; esac
  done
}

resume_stuck_nodes() {
  local n st
  for n in "${NODES[@]}"; do
    st=$(sl sinfo -h -n "$n" -N -o '%t' 2>/dev/null | head -1) || continue
    case "$st" in drain*|drng|down*|fail*)
      log "resuming node $n (state $st)"
      sl scontrol update nodename="$n" state=resume || true;;
    esac
  done
}

all_alive() {
  local d
  for d in $(daemons); do alive "$d" || return 1; done
}

# ---------------------------------------------------------------- subcommands
cmd_up() {
  if [[ -d $DIR/pids ]] && all_alive && nodes_ready; then
    log "cluster already up ($DIR)"
    return 0
  fi
  need_root up
  install -d -m 0755 "$DIR" "$DIR/log"
  exec 9>"$DIR/.lock"
  flock -w 300 9 || die "another '$0 up' holds $DIR/.lock"
  if [[ -d $DIR/pids ]] && all_alive && nodes_ready; then return 0; fi
  ensure_installed
  prepare_dirs
  # stale pid records (crash, reboot): drop them
  local d
  for d in $(daemons); do
    if [[ -e $DIR/pids/$d.pid ]] && ! alive "$d"; then log "stale pid record for $d removed"; rm -f "$DIR/pids/$d.pid"; fi
  done
  start_munged
  if [[ $ACCOUNTING == slurmdbd ]]; then start_mariadb; start_slurmdbd; fi
  start_slurmctld
  local n
  for n in "${NODES[@]}"; do start_slurmd "$n"; done
  local end=$((SECONDS + WAIT_S)) resumed=0
  until nodes_ready; do
    ((SECONDS < end)) || { sl sinfo -N -l >&2 || true; die "nodes not idle after ${WAIT_S}s"; }
    if ((!resumed && SECONDS + WAIT_S - 3 >= end)); then resume_stuck_nodes; resumed=1; fi
    for d in $(daemons); do alive "$d" || die "$d died during start-up"; done
    sleep 0.2
  done
  log "cluster '$CLUSTER' up: nodes ${NODES[*]} (state in $DIR, accounting: $ACCOUNTING)"
}

cmd_down() {
  local purge=0
  [[ ${1:-} == --purge ]] && purge=1
  if [[ -d $DIR/pids ]]; then
    if alive slurmctld; then  # end running jobs so no slurmstepd outlives its slurmd
      local jobs
      jobs=$(sl squeue -h -o %i 2>/dev/null || true)
      if [[ -n $jobs ]]; then
        log "cancelling jobs: $(echo $jobs)"
        # shellcheck disable=SC2086
        sl scancel $jobs 2>/dev/null || true
        local i
        for i in $(seq 50); do [[ -z $(sl squeue -h -o %i 2>/dev/null || true) ]] && break; sleep 0.2; done
      fi
    fi
    stop_recorded
  fi
  if ((purge)); then
    [[ -f $SYSTEM_CONF ]] && grep -qF "$MARK" "$SYSTEM_CONF" && rm -f "$SYSTEM_CONF"
    rm -rf "$DIR"
    log "purged $DIR"
  else
    log "stopped; state left in $DIR (use 'down --purge' to delete it)"
  fi
}

cmd_status() {
  local d rc=0 pid comm
  for d in $(daemons); do
    if alive "$d"; then
      read -r pid comm <"$DIR/pids/$d.pid"; echo "$d: running (pid $pid)"
    else
      echo "$d: not running"; rc=1
    fi
  done
  if ((rc == 0)); then
    sl sinfo -N -o '%N %P %t %c %m %G' || rc=1
    nodes_ready || rc=1
  fi
  return $rc
}

cmd_env() {
  echo "export SLURM_CONF=$CONF"
  echo "export WORKSHOP_SLURM_DIR=$DIR"
  echo "export WORKSHOP_SLURM_SHARED=$DIR/shared"
  echo "export WORKSHOP_SLURM_ACCOUNTING=$ACCOUNTING"
  echo "export WORKSHOP_SLURM_SEAL=$SEAL_DIR"
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) echo "usage: $0 up | down [--purge] | status | env" >&2; exit 2 ;;
esac
