#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv with the pinned versions.
# Idempotent: a second run with an unchanged pyproject.toml returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ -f "$stamp" ]; then exit 0; fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "bootstrap: Python >= 3.11 is needed (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
echo "bootstrap: installing the pinned environment into .venv (about 2 minutes the first time)"
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build onto a CPU machine.
# --no-compile: pip would compile every module of every package it installs (~35 CPU-s here, torch's alone 15), and
# no process of the course or the suite imports most of them; what they import is compiled once, just below.
.venv/bin/python -m pip install -q --no-compile "torch==2.13.0"
.venv/bin/python -m pip install -q --no-compile -e ".[test]"
# the modules a training rank, a dry run, a notebook kernel and the grader import, compiled by importing them once
# (bytecode is written even where the environment says PYTHONDONTWRITEBYTECODE: else every process compiles them
# again); a module first imported later is compiled by the first process that imports it (Makefile)
PYTHONDONTWRITEBYTECODE= .venv/bin/python -c 'import torch.distributed.run, torch.distributed.fsdp, transformers, accelerate.commands.launch
from transformers import BloomForCausalLM, Trainer, TrainingArguments
import workshop.training.train, workshop.training.trainer, workshop.training.comm_recorder, workshop.training.dryrun
import workshop.training.tensor_memory, workshop.student.lab, workshop.student.explorer, workshop.grading.grade
import ipykernel.kernelapp, nbgrader.apps, papermill, pandas, matplotlib.pyplot, ipywidgets, pytest'
rm -f .venv/.installed-*
touch "$stamp"
echo "bootstrap: done ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
