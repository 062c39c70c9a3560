"""Submit course steps as batch jobs, through Slurm or (without Slurm) on this machine.

The jobs layer: steps and site profiles (`steps`, `profiles`), the batch script (`render`), the Slurm and
local backends, watching (`watch`), instructor-run jobs (`shared`). May import `workshop.training` (a
job's config, its checkpoints); never results or the course.

    from workshop.slurm import submit
    job = submit("baseline", profile="ci")
    job.wait()              # a progress widget in Jupyter, one updating line elsewhere
    job.summary()["final_eval_loss"]
    jobs = submit_all({"a": ("baseline", {}), "b": ("fsdp_1gpu", {})}, profile="ci")
    jobs.wait()             # all of them in one display; {"a": JobState.COMPLETED, ...}
"""

from workshop.slurm.group import JobGroup, submit_all
from workshop.slurm.jobs import Job, job_key, submit
from workshop.slurm.records import JobState
from workshop.slurm.steps import STEPS, step_config

__all__ = ["Job", "JobGroup", "JobState", "STEPS", "job_key", "step_config", "submit", "submit_all"]
