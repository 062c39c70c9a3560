"""nbgrader configuration: solutions/ is the source, notebooks/ the student release.

`scripts/release.sh` regenerates notebooks/ from solutions/; a test fails when they differ.
"""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "fsdp-workshop"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"   # kept out of git
# A student's jobs/ (the logs grading reads), tables/ and plots/ must travel with the submission and
# into autograded/, so they are NOT ignored here; `python -m workshop.grading.release` keeps them out of the
# release instead.
# Model weights never travel with a submission: jobs keep their checkpoints in the site's scratch folder
# (a profile's `[env] scratch`), and any left in a job folder (a profile without one) is neither collected
# nor copied into autograded/: grading reads logs, never weights.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", ".*", "checkpoint-*", "*.distcp",
                            "*.safetensors"]
# grading only reads saved logs, but the first cell imports torch and transformers
c.Execute.timeout = 120
# Autograde runs in the course environment that runs `workshop.grading.grade`: its own python3 kernel, whatever
# kernel the notebook opens with for students ("fsdp-workshop", set by workshop/grading/release.py).
c.Execute.kernel_name = "python3"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
