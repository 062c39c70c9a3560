"""fsdp-workshop: the helper package behind the FSDP fine-tuning course.

Four layers, each importing only those before it: `workshop.training` (one config, one training entry
point), `workshop.slurm` (the job API that submits it through Slurm or a local backend),
`workshop.results` (the parsers that turn its logs into the course's exercise tables) and
`workshop.course` (the notebooks' API, their release, headless run and grading). docs/design.md
draws them.
"""

__version__ = "0.1.0"
