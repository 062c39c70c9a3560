#!/bin/sh
# The root seal of the course's jobs (issue 48, item 5): a Slurm Epilog, run by slurmd as root on each node
# of a job when the job ends. It records the SHA-256 of the job's log and of its results (run/summary.json,
# run/metrics.jsonl, run/digest.json, beside the log) in $WORKSHOP_SEAL_DIR/<job id>.sha256, in sha256sum's
# own format, in a folder only root can write. A student can edit their log and results after the job, and
# even re-make an unkeyed digest, but not this file: `workshop verify --seal-dir DIR` compares against it.
#
# Install (docs/instructor.md, "The root seal"): copy to each node as /etc/slurm/seal-epilog.sh, set SEAL_DIR
# below to a root-owned 0755 folder the grader reads, and in slurm.conf:   Epilog=/etc/slurm/seal-epilog.sh
# (WORKSHOP_SEAL_DIR, where slurmd's environment sets it, wins: the test cluster's wrapper sets it).
#
# An Epilog that fails drains the node, so this one always exits 0: a job it cannot seal is simply absent
# from DIR (verify then says "no root seal"). The files are read as the job's own user (setpriv), so root
# never opens anything the student could not read, and a FIFO or a slow file system stops at the timeout.
SEAL_DIR=${WORKSHOP_SEAL_DIR:-/var/lib/workshop/seal}
PATH=/usr/bin:/bin:/usr/sbin:/sbin:${PATH:-}
seal() {
  job=${SLURM_JOB_ID:-} uid=${SLURM_JOB_UID:-} gid=${SLURM_JOB_GID:-}
  case "$job$uid$gid" in ''|*[!0-9]*) return 0 ;; esac
  [ -n "$job" ] && [ -n "$uid" ] && [ -n "$gid" ] || return 0
  # the log's path as Slurm expanded it (%j, %u, ...); only batch jobs have one
  out=$(timeout 10 scontrol show job "$job" 2>/dev/null | sed -n 's/^ *StdOut=//p' | head -n 1)
  case "$out" in /*) ;; *) return 0 ;; esac
  dir=$(dirname -- "$out") log=$(basename -- "$out")
  set -- "$log"
  for f in run/summary.json run/metrics.jsonl run/digest.json; do
    [ -f "$dir/$f" ] && set -- "$@" "$f"
  done
  install -d -m 0755 -o root -g root "$SEAL_DIR" || return 0
  tmp="$SEAL_DIR/.$job.$$"
  if (cd -- "$dir" && timeout 30 setpriv --reuid="$uid" --regid="$gid" --clear-groups sha256sum -- "$@") >"$tmp"; then
    chmod 0644 "$tmp" && mv -f "$tmp" "$SEAL_DIR/$job.sha256"
  fi
  rm -f "$tmp"
}
seal >/dev/null 2>&1
exit 0
