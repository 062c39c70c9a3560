#!/usr/bin/env bash
# Run the whole test suite. As root, the Slurm test cluster (tests/slurm/cluster.sh) is brought up
# by the tests themselves; elsewhere the Slurm tests say why they cannot run.
#
# With no arguments the Slurm tests (tests/slurm) and the rest run side by side, in two pytest
# processes: the cluster tests mostly wait (Slurm's 10 s poll floor, sleeping jobs, a class of
# watchers), and the rest fills those waits. The rest runs at a lower CPU priority (nice), so the
# cluster's timed checks see the cores they would see alone. With arguments: one pytest, as given.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15)
if [ $# -gt 0 ]; then
    exec "${pytest[@]}" "$@"
fi

scratch=$(mktemp -d /tmp/workshop-tests.XXXXXX)
"${pytest[@]}" --basetemp="$scratch/slurm" tests/slurm > "$scratch/slurm.log" 2>&1 &
slurm_pid=$!
trap 'kill "$slurm_pid" 2>/dev/null || true' INT TERM
rest=0
nice -n 10 "${pytest[@]}" --basetemp="$scratch/rest" --ignore=tests/slurm tests || rest=$?
slurm=0
wait "$slurm_pid" || slurm=$?
echo
echo "=============================== tests/slurm (run beside the rest) ==============================="
cat "$scratch/slurm.log"
echo "tests/slurm: exit $slurm; the rest: exit $rest"
if [ "$rest" -eq 0 ] && [ "$slurm" -eq 0 ]; then rm -rf "$scratch"; else echo "the tests' files are kept in $scratch"; fi
# pytest's own codes: 1 = tests failed, 2+ = interrupted or a usage error; the worse one wins
exit $(( rest > slurm ? rest : slurm ))
