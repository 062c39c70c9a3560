# The two set-up commands of README.md. Each installs what it needs first.
.PHONY: course test venv

venv:
	@bash scripts/bootstrap.sh

# The main job: every notebook of the course, on the embedded default, into results/.
course: venv
	.venv/bin/python -m workshop.course --output results --cell-timeout 600

# The test suite, including the real Slurm test cluster on localhost (installed and started as root).
test: venv
	bash scripts/test.sh
