# The two set-up commands of README.md. Each installs what it needs first.
.PHONY: course test test-fast venv mutation

# Bytecode is written (some machines, CI's among them, set PYTHONDONTWRITEBYTECODE): a module's first import
# compiles it for every later process (scripts/bootstrap.sh has pip compile nothing).
unexport PYTHONDONTWRITEBYTECODE

venv:
	@bash scripts/bootstrap.sh

# The main job: every notebook of the course, on the embedded default, into results/.
course: venv
	.venv/bin/python -m workshop.grading.run_all --output results --cell-timeout 600

# The test suite, including the real Slurm test cluster on localhost (installed and started as root).
test: venv
	bash scripts/test.sh

# The inner loop (not CI): the tests that start no process (no Slurm, no notebook run, no training job; marker
# `fast`, given by tests/conftest.py from what each test uses), about 600 tests in under 5 minutes on 2 cores.
test-fast: venv
	bash scripts/test.sh --fast

# Mutation testing (not part of `make test`: about an hour on 2 cores): mutmut changes one line at a time of the
# modules that grade students and instructors and runs the fast tests that reach it; the report goes to
# benchmarks/cpu/mutation-DATE.md (score, and the survivors left on purpose with their reasons).
mutation: venv
	.venv/bin/python -m pip install -q -e ".[test,mutation]"
	.venv/bin/python benchmarks/mutation.py
