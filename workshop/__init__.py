"""fsdp-workshop: the helper package behind the FSDP fine-tuning course.

Rooms, each importing only those before it: `workshop.training` (one config, one training entry point),
`workshop.slurm` (the job API), `workshop.results` (logs into the course's tables), `workshop.comm`
(communication), `workshop.bench` (the measured configurations), then one room per person served:
`workshop.student` (what the notebooks import), `workshop.site` (the admin's checks, budget and app) and
`workshop.grading` (the instructor's release and grading). docs/design.md names every module.
"""

__version__ = "0.1.0"
