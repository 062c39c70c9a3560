#!/usr/bin/env bash
# The course on the versions the lent GPU machine has (torch 2.11.0, transformers 5.17.x, accelerate 1.15.x;
# everything else as pyproject.toml pins), on this CPU machine, before a GPU run finds out in its 15 minutes:
#
#   bash scripts/compat_check.sh            # build the side environment once, run the checks, write the report
#
# 1. a side virtualenv in $COMPAT_DIR (default .compat/, git-ignored): PyPI's default torch 2.11.0 build for
#    this Python, a CUDA build that runs on CPU; pip installs its nvidia-* libraries too (about 3 GB), as
#    `import torch` loads them even with no GPU. The project itself is not installed (its pins would pull
#    torch 2.13 back): the checks run it from this checkout (PYTHONPATH).
# 2. in it: the fast tier (`scripts/test.sh --fast`), a collection of tests/gpu, and notebooks 02 and 03 on
#    the local profile (`python -m workshop.grading.run_all --only 02,03`);
# 3. benchmarks/compat/compat-DATE.json and .md: versions, passed, failed, what was not measured and why
#    (benchmarks/compat_report.py).
# Each step's output is kept in $COMPAT_DIR/logs/. Exit status 0 only if every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
COMPAT_DIR=${COMPAT_DIR:-$ROOT/.compat}
PY=${PYTHON:-python3}
TORCH=${COMPAT_TORCH:-2.11.0}
TRANSFORMERS=${COMPAT_TRANSFORMERS:-5.17.*}
ACCELERATE=${COMPAT_ACCELERATE:-1.15.*}
VENV=$COMPAT_DIR/venv
LOGS=$COMPAT_DIR/logs
mkdir -p "$LOGS"

# the requirements: pyproject's pins and test extras, but the three packages the GPU machine has in other versions
reqs=$COMPAT_DIR/requirements.txt
"$PY" - "$TORCH" "$TRANSFORMERS" "$ACCELERATE" > "$reqs" <<'EOF'
import sys, tomllib
torch, transformers, accelerate = sys.argv[1:]
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
override = {"torch": f"torch=={torch}", "transformers": f"transformers=={transformers}",
            "accelerate": f"accelerate=={accelerate}"}
for line in project["dependencies"] + project["optional-dependencies"]["test"]:
    name = line.split("==")[0].strip().lower()
    print(override.get(name, line))
EOF
stamp=$VENV/.installed-$(sha256sum "$reqs" | cut -c1-16)
build_status=0
if [ ! -f "$stamp" ]; then
    echo "compat_check: building $VENV (torch $TORCH, transformers $TRANSFORMERS, accelerate $ACCELERATE)"
    started=$(date +%s)
    { [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"; } &&
        "$VENV/bin/python" -m pip install -q --upgrade pip &&
        "$VENV/bin/python" -m pip install -q -r "$reqs" > "$LOGS/build.log" 2>&1 || build_status=$?
    echo "$(( $(date +%s) - started ))" > "$LOGS/build.seconds"
    if [ "$build_status" -eq 0 ]; then rm -f "$VENV"/.installed-*; touch "$stamp"; else
        echo "compat_check: the side environment did not build (pip exit $build_status): $LOGS/build.log" >&2
        tail -20 "$LOGS/build.log" >&2
    fi
fi

run_step() {   # run_step NAME COMMAND...: its output to $LOGS/NAME.log, its exit status and seconds to NAME.status
    local name=$1; shift
    local t0; t0=$(date +%s)
    echo "compat_check: $name ..."
    "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    echo "$rc $(( $(date +%s) - t0 ))" > "$LOGS/$name.status"
    echo "compat_check: $name exit $rc after $(( $(date +%s) - t0 )) s"
}

rm -f "$LOGS"/*.status
if [ "$build_status" -eq 0 ]; then
    export PATH="$VENV/bin:$PATH" PYTHONPATH="$ROOT" OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
        HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1 WORKSHOP_TEST_TIER=fast
    pytest=("$VENV/bin/python" -m pytest -q -p no:cacheprovider -rfE --junitxml)
    run_step versions "$VENV/bin/python" -m pip list --format=json
    # all of the fast tier but the test that reads the report this run is writing (the supported range's backing)
    run_step fast_tier "${pytest[@]}" "$LOGS/fast_tier.xml" -m fast --ignore=tests/slurm --ignore=tests/gpu \
        --deselect tests/test_env_pins.py::test_the_supported_range_holds_the_pins_and_is_backed_by_its_report tests
    run_step gpu_collect "$VENV/bin/python" -m pytest -q -p no:cacheprovider --collect-only tests/gpu
    rm -rf "$COMPAT_DIR/results"
    run_step notebooks_02_03 "$VENV/bin/python" -m workshop.grading.run_all --output "$COMPAT_DIR/results" --profile local \
        --only 02,03 --cell-timeout 600
fi
"$PY" benchmarks/compat_report.py --logs "$LOGS" --build-status "$build_status" --results "$COMPAT_DIR/results" \
    --requested "torch==$TORCH" "transformers==$TRANSFORMERS" "accelerate==$ACCELERATE"
