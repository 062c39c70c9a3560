"""Jobs start clean (issue 23, item 9): a job submitted from a notebook inherits nothing of the Jupyter
session. A real kernel (ipykernel, started by jupyter_client as JupyterLab starts one) runs with what an
Open OnDemand session gives it: its server's JPY_SESSION_NAME, the app's JUPYTER_CONFIG_PATH and
CONFIG_FILE; jupyter_client adds JPY_PARENT_PID, ipykernel itself MPLBACKEND, TERM, PAGER and
FORCE_COLOR. A cell submits a job on the test cluster; the job's batch shell writes its environment,
and none of those reach it (sbatch hands a job the environment it was called with).

Nor does the session's shell (issue 40, item 5): a session whose setup activated a virtualenv has
VIRTUAL_ENV, VIRTUAL_ENV_PROMPT, PS1 and its bin folder first on PATH; the job starts from the PATH the
OOD app recorded before that setup (WORKSHOP_SITE_PATH), each folder once, and its own setup adds what
the profile names. PYTHONPATH is kept (sites and checkouts use it). Nor the shell's own session variables
(issue 54, point 6): OLDPWD (the folder the session's terminal was in before)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from workshop.slurm.profiles import PROFILES_DIR

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
SESSION = ["JPY_SESSION_NAME", "JPY_PARENT_PID", "JUPYTER_CONFIG_PATH", "CONFIG_FILE", "MPLBACKEND", "TERM", "PAGER",
           "FORCE_COLOR", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PS1", "OLDPWD"]

CELL = """
import json, os
from workshop.slurm import submit
present = {{k: os.environ.get(k) for k in {session!r} + ["PATH", "PYTHONPATH"]}}
job = submit("baseline", profile={profile!r}, overrides={{"train_size": 4, "eval_size": 2, "epochs": 1}},
             jobs_dir={jobs!r})
state = job.wait(timeout=180, poll=0.5)
print("RESULT " + json.dumps({{"present": present, "state": state.value, "job_dir": str(job.job_dir),
                              "job_id": job.job_id}}))
"""


def test_a_job_submitted_from_a_kernel_inherits_nothing_of_the_jupyter_session(cluster, tmp_path: Path) -> None:
    from jupyter_client.manager import start_new_kernel

    jobs = cluster.shared / f"session-env-{os.getpid()}-{time.time_ns()}"
    jobs.mkdir(mode=0o1777)
    # the site's setup writes what the batch shell inherited, then ends the job: no training needed
    profile = tmp_path / "ci-env.toml"
    profile.write_text((PROFILES_DIR / "ci.toml").read_text().replace(
        'python_env = "current"', 'python_env = "current"\nsetup = [\'env -0 > "$PWD/inherited.env"\', "exit 0"]'))
    session = tmp_path / "ood-session"
    site_path = cluster.env["PATH"]
    session_venv = tmp_path / "session-venv"     # what the session's setup activated before JupyterLab started
    python_bin = str(Path(sys.executable).parent)
    session_path = os.pathsep.join([str(session_venv / "bin"), python_bin, site_path, python_bin])
    pythonpath = os.pathsep.join([str(ROOT), str(tmp_path / "site-lib")])
    env = {**os.environ, **cluster.env, "JPY_SESSION_NAME": str(session / "fsdp-workshop/01_baseline.ipynb"),
           "JUPYTER_CONFIG_PATH": str(session / "jupyter-config"), "CONFIG_FILE": str(session / "config.py"),
           "WORKSHOP_SLURM_MIN_POLL_S": "0.5", "PATH": session_path, "WORKSHOP_SITE_PATH": site_path,
           "VIRTUAL_ENV": str(session_venv), "VIRTUAL_ENV_PROMPT": "(session-venv) ", "PS1": "(session-venv) $ ",
           "PYTHONPATH": pythonpath, "OLDPWD": str(tmp_path)}  # a real folder: bash keeps it
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path), startup_timeout=180)
    outputs: list[str] = []
    try:
        reply = kc.execute_interactive(CELL.format(session=SESSION, profile=str(profile), jobs=str(jobs)), timeout=300,
                                       output_hook=lambda msg: outputs.append(msg["content"].get("text", "")
                                                                              + msg["content"].get("evalue", "")))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(outputs)
    assert reply["content"]["status"] == "ok", text[-3000:]
    result = json.loads(text.split("RESULT ", 1)[1].splitlines()[0])
    assert all(result["present"][k] for k in SESSION), result["present"]      # the kernel did carry them
    assert result["present"]["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
    assert result["state"] == "COMPLETED", result
    inherited = dict(item.split("=", 1) for item in
                     (Path(result["job_dir"]) / "inherited.env").read_text().split("\0") if "=" in item)
    assert inherited["SLURM_JOB_ID"] == result["job_id"] and inherited["PATH"]    # a real job's environment
    assert [k for k in SESSION if k in inherited] == []
    assert not [k for k in inherited if k.startswith(("JPY_", "JUPYTER_", "IPY_"))]
    # the session's PATH additions are gone, the site's folders stay, each once, in their order
    assert result["present"]["PATH"] == session_path and result["present"]["PYTHONPATH"] == pythonpath
    job_path = inherited["PATH"].split(os.pathsep)
    assert str(session_venv / "bin") not in job_path
    assert job_path == list(dict.fromkeys(x for x in site_path.split(os.pathsep) if x)), (job_path, site_path)
    assert inherited["PYTHONPATH"] == pythonpath
