#!/usr/bin/env bash
# One command for a lent GPU (benchmarks/README.md): the carried wheels installed offline, the machine and
# its versions recorded, the GPU test tier (tests/gpu), then `workshop bench --device cuda`, all written to
# <out>/<date>-<gpu>.{json,md,png} with the tier's report (-tests.xml, -tests.txt), the whole log (-log.txt)
# and the executed notebooks (-notebooks.tar.gz) beside them. Predicted (not yet measured): about 7 minutes on
# one H100.
#
#   GPU_CHECK_COMMIT=<sha> bash scripts/gpu_check.sh --out "$OUT"   # on the GPU machine
#   bash scripts/gpu_check.sh --dry-run                             # anywhere: every step that needs no GPU
#
# Options:
#   --dry-run          check the wheels (hashes, and that they install for Python 3.12 manylinux x86_64),
#                      record the versions, collect the tier and report "no CUDA: N skipped"; no bench
#   --out DIR          where the files go (default benchmarks/results; a dry run: a temporary folder)
#   --wheels DIR       the carried wheels (default $GPU_WHEELS, else .whl; scripts/gpu_wheels.py download fetches them)
#   --only tier|bench  one part (a rerun after a fix)
#   -k EXPR            the tier's tests to run (pytest -k), e.g. -k "memory and offload"
#   --tier-timeout S, --bench-timeout S   each part is stopped by then (default 300 and 240), so the
#                      command returns what it has inside the device call's time limit
# Exit: 0 all passed (dry run: every tier test skipped for want of CUDA); 1 a test or a bench run failed;
# 2 the wheels or the set-up failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dry=0 out="" wheels=${GPU_WHEELS:-.whl} only=all kexpr="" tier_timeout=300 bench_timeout=240
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --out) out=$2; shift ;;
        --wheels) wheels=$2; shift ;;
        --only) only=$2; shift ;;
        -k) kexpr=$2; shift ;;
        --tier-timeout) tier_timeout=$2; shift ;;
        --bench-timeout) bench_timeout=$2; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case $only in all|tier|bench) ;; *) echo "gpu_check: --only takes tier or bench, not $only" >&2; exit 2 ;; esac

# The project's venv where there is one (a developer's machine, CI); the machine's python3 on a lent GPU.
py=${PYTHON:-}
if [ -z "$py" ]; then if [ -x .venv/bin/python ]; then py=$root/.venv/bin/python; else py=python3; fi; fi
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
exec > >(tee -a "$work/log.txt") 2>&1
started=$(date +%s)
say() { echo "[gpu_check +$(( $(date +%s) - started ))s] $*"; }

if [ $dry = 1 ]; then
    out=${out:-$work/out}
    case $(cd "$(dirname "$out")" 2>/dev/null && pwd)/$(basename "$out") in
        */benchmarks/results|*/benchmarks/results/*) say "a dry run measures nothing: give it another --out"; exit 2 ;;
    esac
else
    out=${out:-$root/benchmarks/results}
fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

say "1/5 wheels: $wheels against scripts/gpu_wheels.lock"
"$py" scripts/gpu_wheels.py check --dest "$wheels" || exit 2
if [ $dry = 1 ]; then
    "$py" scripts/gpu_wheels.py install --dest "$wheels" --target "$work/site-cp312" --cross || exit 2
    rm -rf "$work/site-cp312"
    export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
else
    "$py" scripts/gpu_wheels.py install --dest "$wheels" --target "$work/site" || exit 2
    export PYTHONPATH="$work/site:$root${PYTHONPATH:+:$PYTHONPATH}"
    "$py" -c "import papermill, nbclient, ipykernel, ipywidgets, workshop.student.lab" || {
        say "the carried wheels do not import on this python: see the error above"; exit 2; }
fi

say "2/5 this machine and its versions"
"$py" -m workshop.bench.gpu_report env > "$work/env.json" || exit 2
"$py" - "$work/env.json" <<'EOF'
import json, sys
env = json.load(open(sys.argv[1]))
g = env["gpu"]
print(f"  GPU: {g.get('name') or g.get('why_none')}" + (f", driver {g['driver']}, CUDA {g['cuda_runtime']}" if g.get("name") else ""))
print(f"  python {env['python']} ({env['python_executable']}), commit {env['commit']['sha']} ({env['commit']['from']})")
for r in env["drift"]:
    if r["relation"] != "same":
        print(f"  {r['package']:<16} pinned {r['pinned']:<12} here {r['here'] or '-':<16} {r['relation']}")
EOF
stem=$("$py" -m workshop.bench.gpu_report stem --out "$out" --env "$work/env.json") || exit 2
say "results: $out/$stem.*"

tier_rc=0
if [ "$only" != bench ]; then
    say "3/5 the GPU tier (tests/gpu), at most ${tier_timeout} s"
    export WORKSHOP_GPU_FIGURES="$work/figures.json" WORKSHOP_GPU_NOTEBOOKS="$work/notebooks" \
        WORKSHOP_GPU_RUNS="$work/runs"
    mkdir -p "$work/notebooks" "$work/runs"
    timeout -k 20 "$tier_timeout" "$py" -m pytest tests/gpu -rA -p no:cacheprovider \
        --junitxml "$work/tests.xml" ${kexpr:+-k "$kexpr"} 2>&1 | tee "$work/tests.txt"
    tier_rc=${PIPESTATUS[0]}
    [ $tier_rc -eq 124 ] && say "the tier ran out of its ${tier_timeout} s and was stopped"
fi

bench_rc=0
if [ $dry = 1 ]; then
    say "4/5 bench: not on a dry run (it measures a GPU)"
elif [ "$only" != tier ]; then
    say "4/5 workshop bench --device cuda, at most ${bench_timeout} s"
    timeout -k 20 "$bench_timeout" "$py" -m workshop bench --device cuda --output "$out" \
        --runs-dir "$work/bench" --timeout 150
    bench_rc=$?
    [ $bench_rc -eq 124 ] && say "the bench ran out of its ${bench_timeout} s and was stopped"
fi

say "5/5 report"
"$py" -m workshop.bench.gpu_report finish --out "$out" --stem "$stem" --work "$work" \
    $([ $dry = 1 ] && echo --dry-run)
report_rc=$?
say "files: $(cd "$out" && ls "$stem"* 2>/dev/null | tr '\n' ' ')"
if [ $dry = 1 ] || [ $report_rc -ne 0 ]; then exit $report_rc; fi
[ $tier_rc -eq 0 ] && [ $bench_rc -eq 0 ] && exit 0
exit 1
