"""What a job inherits from the shell that submits it (issue 40, item 5): the session's virtualenv, prompt and
PATH additions go, PYTHONPATH stays. The real job's environment is tests/slurm/test_session_env_on_cluster.py's."""

from __future__ import annotations

from workshop.slurm.slurm_backend import scrubbed_env


def test_a_recorded_site_path_keeps_only_the_sites_folders_once() -> None:
    env = {"PATH": "/home/s/.venv/bin:/opt/site/bin:/usr/bin:/home/s/.venv/bin:/usr/bin",
           "WORKSHOP_SITE_PATH": "/opt/site/bin:/usr/bin:/bin", "VIRTUAL_ENV": "/home/s/.venv",
           "VIRTUAL_ENV_PROMPT": "(.venv) ", "PS1": "(.venv) $ ", "PYTHONPATH": "/home/s/fsdp-workshop",
           "HOME": "/home/s"}
    out = scrubbed_env(env)
    assert out["PATH"] == "/opt/site/bin:/usr/bin"
    assert "VIRTUAL_ENV" not in out and "VIRTUAL_ENV_PROMPT" not in out and "PS1" not in out
    assert out["PYTHONPATH"] == "/home/s/fsdp-workshop" and out["HOME"] == "/home/s"


def test_without_a_record_the_activated_virtualenv_goes_from_path() -> None:
    env = {"PATH": "/home/s/.venv/bin:/usr/local/bin:/usr/bin:/usr/local/bin", "VIRTUAL_ENV": "/home/s/.venv/"}
    assert scrubbed_env(env)["PATH"] == "/usr/local/bin:/usr/bin"
    assert scrubbed_env({"PATH": "/a:/b"})["PATH"] == "/a:/b"


def test_a_local_jobs_rendezvous_port_is_not_handed_on() -> None:
    """The local backend gives each multi-node job its own port; a job submitted from inside one chooses anew."""
    out = scrubbed_env({"PATH": "/usr/bin", "WORKSHOP_RDZV_PORT": "23456", "WORKSHOP_SITE_PATH": "/usr/bin"})
    assert "WORKSHOP_RDZV_PORT" not in out and out["WORKSHOP_SITE_PATH"] == "/usr/bin"


def test_the_shells_own_session_variables_are_not_handed_on() -> None:
    """Issue 54, point 6: a student's terminal had `cd`'d, and every job inherited OLDPWD (the session's folder)."""
    shell = {"OLDPWD": "/home/s/ondemand/session-1", "PWD": "/home/s/fsdp-workshop", "SHLVL": "3", "_": "/usr/bin/env",
             "PS2": "> ", "PROMPT_COMMAND": "history -a", "HISTFILE": "/home/s/.bash_history", "COLUMNS": "120",
             "LINES": "40"}
    out = scrubbed_env({"PATH": "/usr/bin", "HOME": "/home/s", "USER": "s", **shell})
    assert [k for k in shell if k in out] == []
    assert out == {"PATH": "/usr/bin", "HOME": "/home/s", "USER": "s"}
