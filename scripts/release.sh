#!/usr/bin/env bash
# Regenerate the student release notebooks/ from the instructor source solutions/ (nbgrader).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m workshop.grading.release "$@"
