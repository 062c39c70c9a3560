#!/usr/bin/env bash
# Run the whole test suite. As root, the Slurm test cluster (tests/slurm/cluster.sh) is brought up
# by the tests themselves; elsewhere the Slurm tests say why they cannot run.
#
# With no arguments the suite runs as five pytest processes side by side: the Slurm tests
# (tests/slurm), the tests that read the course run (the `course_run` fixture: grading, verify,
# the notebooks' own checks) in two halves, which run the course once between them, and the rest in
# two halves, each kind packed by file on the committed profile
# (WORKSHOP_TEST_PART in tests/conftest.py, tests/suite_split.py). Much of each
# part waits (Slurm's 10 s poll floor, a job's processes starting, a kernel starting); side by side
# the two cores stay busy. The local parts run at a lower CPU priority (nice), so the cluster's
# timed checks see the cores they would see alone. When the Slurm part ends, that reason ends with it: the
# local parts and their processes go back to this script's priority (root only may raise a priority; elsewhere
# they stay niced), so that on a shared machine they do not hand their CPU to a neighbour. With arguments: one
# pytest, as given; with --fast first, the fast tier (below).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
# Bytecode is written (these machines and CI set PYTHONDONTWRITEBYTECODE=1): each of the suite's ~400 Python
# processes otherwise compiles every workshop module it imports (0.2-0.4 CPU-s a process) and each pytest
# rewrites every test module's asserts again (11.4 -> 7.3 CPU-s to collect the suite); __pycache__/ is ignored by git.
unset PYTHONDONTWRITEBYTECODE
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15)
# `make test-fast`: the tests that start no process (marker `fast`, tests/tiers.py), in one pytest; a test of the
# tier that starts one anyway fails and names it. Further arguments narrow it (a file, -k, -x).
if [ "${1:-}" = "--fast" ]; then
    shift
    export WORKSHOP_TEST_TIER=fast
    exec "${pytest[@]}" -m fast --ignore=tests/slurm --ignore=tests/gpu "$@"
fi
if [ $# -gt 0 ]; then
    exec "${pytest[@]}" "$@"
fi

scratch=$(mktemp -d /tmp/workshop-tests.XXXXXX)
# one cache of dry runs for the five parts (tests/conftest.py's dry_run_cache): a config is dry-run once per suite
export WORKSHOP_DRYRUN_CACHE="$scratch/dryrun"
started=$(date +%s)
# Each part queues its local-backend jobs in its own slot folder (workshop/slurm/local_queue.py): with one
# folder per user, the course part's jobs held both cores' slots and a job another part timed sat queued.
# Each part writes its profile (tests/suite_profile.py: per test and per fixture, wall and CPU seconds); the five are
# joined into test-artifacts/suite-profile.json at the end, so a slow change shows in the next run.
WORKSHOP_TEST_PROFILE="$scratch/profile-slurm.json" WORKSHOP_LOCAL_SLOTS="$scratch/slots-slurm" "${pytest[@]}" \
    --basetemp="$scratch/slurm" tests/slurm > "$scratch/slurm.log" 2>&1 &
slurm_pid=$!
local_part() {    # one local part (tests/suite_split.py), niced, with its own slots, basetemp and profile
    WORKSHOP_TEST_PROFILE="$scratch/profile-$1.json" WORKSHOP_LOCAL_SLOTS="$scratch/slots-$1" \
        WORKSHOP_TEST_PART=$1 exec nice -n 10 "${pytest[@]}" --basetemp="$scratch/$1" --ignore=tests/slurm tests
}
# the course parts: the tests that read the course run in two halves; the course itself runs once, into
# course-run/, by whichever half asks first, and the other waits for it (tests/course_share.py)
course_pids=()
for part in course1 course2; do
    WORKSHOP_COURSE_RUN_SHARED="$scratch/course-run" local_part "$part" > "$scratch/$part.log" 2>&1 &
    course_pids+=($!)
done
rest_pids=()    # the rest in two halves: while one waits, the other runs
local_part rest1 &    # shows as it runs, as the rest did
rest_pids+=($!)
local_part rest2 > "$scratch/rest2.log" 2>&1 &
rest_pids+=($!)
descendants() { local p; for p in "$@"; do echo "$p"; descendants $(ps -o pid= --ppid "$p" || true); done; }
(   # the Slurm part done: the local parts, and what they started, back at this script's priority
    while kill -0 "$slurm_pid" 2>/dev/null; do sleep 2; done
    renice -n "$(nice)" -p $(descendants "${rest_pids[@]}" "${course_pids[@]}") >/dev/null 2>&1 || true
) &
renice_pid=$!
trap 'kill "$slurm_pid" "${course_pids[@]}" "${rest_pids[@]}" "$renice_pid" 2>/dev/null || true' INT TERM
rest1=0
wait "${rest_pids[0]}" || rest1=$?
rest2=0
wait "${rest_pids[1]}" || rest2=$?
course1=0
wait "${course_pids[0]}" || course1=$?
course2=0
wait "${course_pids[1]}" || course2=$?
slurm=0
wait "$slurm_pid" || slurm=$?
for part in rest2 course1 course2 slurm; do
    echo
    echo "=============================== the $part part (run beside rest1) ==============================="
    cat "$scratch/$part.log"
done
echo "exit codes: rest1 $rest1, rest2 $rest2, course1 $course1, course2 $course2, tests/slurm $slurm; the suite took $(( $(date +%s) - started )) s"
.venv/bin/python -m tests.suite_profile join test-artifacts/suite-profile.json "$scratch"/profile-*.json || true
codes=("$rest1" "$rest2" "$course1" "$course2" "$slurm")
worst=0    # the worst of pytest's own codes: 1 = tests failed, 2+ = interrupted or a usage error; 5 = none collected
for code in "${codes[@]}"; do [ "$code" -gt "$worst" ] && worst=$code; done
if [ "$worst" -eq 0 ]; then rm -rf "$scratch"; else echo "the tests' files are kept in $scratch"; fi
exit "$worst"
