"""fsdp-workshop: the helper package behind the FSDP fine-tuning course.

One training entry point (`workshop.train`) driven by one config (`workshop.config`), a job API
that submits it through Slurm or a local backend, and the parsers that turn its logs into the
course's exercise tables.
"""

__version__ = "0.1.0"
