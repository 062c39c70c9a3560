"""Render the Open OnDemand app in `slurm/ood/` for a site profile: `python -m workshop.site.ood render`.

    python -m workshop.site.ood render --profile example-hpc --out ~/ondemand/dev/fsdp-workshop

Two kinds of templating meet here, on purpose kept apart:

* `@{name}` placeholders (the same syntax as `slurm/templates/`) are filled now, from the profile:
  the form's partitions (the CPU or interactive ones: `[ood] partition` and the profile's other
  partitions without GPUs), account, reservation (`[ood] reservation`) and session minutes (capped by the
  partition's MaxTime); the cores and memory of a session (`[ood] cpus`, `mem`: a notebook kernel's,
  since the jobs train, not the session); the environment set-up and exports of `template/script.sh.erb`.
* ERB (`<%= ... %>`) is left alone: Open OnDemand evaluates it when a student launches a session
  (the form's values, the node's host, port and password), exactly as in OOD's own Jupyter app.

The output folder is a complete batch_connect app (manifest.yml, form.yml.erb, submit.yml.erb,
template/before.sh.erb, template/script.sh.erb, view.html.erb) to copy under
/var/www/ood/apps/sys/ or a user's ~/ondemand/dev/.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import shutil
import sys
from pathlib import Path

from workshop.slurm.profiles import SLURM_DIR, Partition, Profile, ProfileError, current_env_activation, load_profile, time_seconds
from workshop.slurm.render import shell_value

OOD_DIR = SLURM_DIR / "ood"
FILES = ("manifest.yml", "form.yml.erb", "submit.yml.erb", "template/before.sh.erb",
         "template/script.sh.erb", "template/terminal.bashrc", "view.html.erb")
_PLACEHOLDER = re.compile(r"@\{([a-z_]+)\}")
_MEM_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def _q(text: str) -> str:
    """A YAML scalar that stays a string (a JSON string is valid YAML)."""
    return json.dumps(text)


def _mem_mb(mem: str) -> int:
    return int(int(mem[:-1]) * _MEM_MB[mem[-1]]) if mem else 0


# nbgrader's parts in JupyterLab: (its labextension's plugins, its server extensions). A session of this app is
# a student's: the instructor's tools never load there (the formgrader reads the gradebook, Create Assignment
# edits grade cells, the course list lists the instructor's courses). The assignment list and Validate are
# the student's side of nbgrader's exchange: they stay where the site uses it ([ood] exchange).
NBGRADER_INSTRUCTOR = (("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                        "@jupyter/nbgrader:course-list"),
                       ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"))
NBGRADER_EXCHANGE = (("@jupyter/nbgrader:menu", "@jupyter/nbgrader:assignment-list",
                      "@jupyter/nbgrader:validate-assignment"),
                     ("nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.validate_assignment"))


def disabled_extensions(exchange: bool) -> tuple[list[str], list[str]]:
    """(JupyterLab plugins, server extensions) a student's session turns off."""
    lab, server = list(NBGRADER_INSTRUCTOR[0]), list(NBGRADER_INSTRUCTOR[1])
    if not exchange:
        lab += NBGRADER_EXCHANGE[0]
        server += NBGRADER_EXCHANGE[1]
    return lab, server


SESSION_STEP_MIN = 15      # the form's minutes go in steps of this; the shortest session
SESSION_MAX_MIN = 12 * 60  # the longest, where the partition allows more


def max_minutes(max_time: str) -> int:
    """The longest session a partition takes, in whole minutes (its MaxTime; 12 h where none is known)."""
    return min(SESSION_MAX_MIN, time_seconds(max_time) // 60) if max_time else SESSION_MAX_MIN


def session_partition(profile: Profile) -> Partition:
    """The CPU or interactive partition JupyterLab sessions run on (`[ood] partition`)."""
    if not profile.session_partition:
        raise ProfileError(profile.source, "ood.partition", "the profile names no partition for JupyterLab sessions, "
                           "and a session on a GPU partition would hold a GPU node's cores and memory while its "
                           "student edits notebooks", "add [slurm.partitions.<key>] for your CPU or interactive "
                           "partition (gpus_per_node = 0) and [ood] partition = \"<key>\"")
    part = profile.partitions[profile.session_partition]
    if not part.name:
        raise ProfileError(profile.source, f"slurm.partitions.{part.key}.name", "the session partition has no Slurm "
                           "name", "write name = \"...\" as `sinfo -s` prints it")
    return part


def session_minutes(profile: Profile) -> tuple[int, int]:
    """(default, maximum) minutes of a session on its partition: the profile's time, rounded up to the
    form's step, never beyond the partition's limit."""
    cap = max_minutes(session_partition(profile).max_time)
    wanted = math.ceil(time_seconds(profile.time) / 60 / SESSION_STEP_MIN) * SESSION_STEP_MIN
    return max(min(wanted, cap), min(SESSION_STEP_MIN, cap)), cap


def site_values(profile: Profile, cluster: str | None = None, course_dir: str = "~/fsdp-workshop") -> dict[str, str]:
    """Every `@{name}` of the app's templates, for one site profile."""
    if profile.backend != "slurm":
        raise ProfileError(profile.source, "backend", "Open OnDemand submits to Slurm, but this profile runs "
                           "locally", "render the app for your site's Slurm profile (e.g. --profile example-hpc)")
    default = session_partition(profile)
    parts = [default] + [p for p in profile.partitions.values() if p.name and not p.gpus_per_node and p is not default]
    options = [f"      - [{_q(p.name + ': no GPUs')}, {_q(p.name)}, data-max-session-minutes: {max_minutes(p.max_time)}]"
               for p in parts]
    setup = list(profile.setup) or current_env_activation()
    workshop_profile = profile.name if Path(profile.source).parent == SLURM_DIR / "profiles" else profile.source
    exports = [f"export WORKSHOP_PROFILE={shlex.quote(workshop_profile)}"]
    if profile.hf_home:
        exports.append(f"export HF_HOME={shell_value(profile.hf_home)}")
    exports += ["export HF_HUB_OFFLINE=1", "export HF_DATASETS_OFFLINE=1"]   # a compute node: the cache only
    exports.append(f"export WANDB_MODE={shlex.quote(profile.wandb_mode)}")
    exports += [f"export {k}={shell_value(v)}" for k, v in profile.env.items()]
    lab_off, server_off = disabled_extensions(profile.session_exchange)
    return {
        "profile": profile.name,
        "disabled_labextensions": json.dumps({"disabledExtensions": dict.fromkeys(lab_off, True)}),
        "disabled_server_extensions": repr(dict.fromkeys(server_off, False)),
        "site": profile.description or profile.name,
        "cluster": _q(cluster or profile.name),
        "course_dir": _q(course_dir),
        "partition": _q(default.name),
        "partition_options": "\n".join(options),
        "account": _q(profile.account),
        "reservation": _q(profile.session_reservation),
        "minutes": str(session_minutes(profile)[0]),
        "min_minutes": str(min(SESSION_STEP_MIN, min(max_minutes(p.max_time) for p in parts))),
        "max_minutes": str(session_minutes(profile)[1]),
        "session_cpus": str(profile.session_cpus),
        "session_mem_mb": str(_mem_mb(profile.session_mem)),
        "session_mem": profile.session_mem,
        "setup": "\n".join(setup),
        "exports": "\n".join(exports),
    }


def fill(text: str, values: dict[str, str], name: str = "template") -> str:
    """Replace every `@{name}`; an unknown one is an error, never left for OOD to trip over."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{name}: unknown placeholder @{{{m.group(1)}}}; known: {', '.join(sorted(values))}")
        return values[m.group(1)]
    return _PLACEHOLDER.sub(one, text)


def render_app(profile: str | Path | Profile, out_dir: str | Path, cluster: str | None = None,
               course_dir: str = "~/fsdp-workshop") -> list[Path]:
    """Write the site's app into `out_dir`; returns the files written."""
    prof = load_profile(profile)
    values = site_values(prof, cluster, course_dir)
    out = Path(out_dir)
    written = []
    for rel in FILES:
        text = fill((OOD_DIR / rel).read_text(), values, rel)
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        shutil.copymode(OOD_DIR / rel, dest)
        written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workshop.site.ood", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="write the Open OnDemand app for a site profile")
    r.add_argument("--profile", required=True, help="site profile name (slurm/profiles/) or .toml path")
    r.add_argument("--out", required=True, help="folder to write the app into")
    r.add_argument("--cluster", default=None, help="OOD cluster id (clusters.d/<id>.yml); default: the profile's name")
    r.add_argument("--course-dir", default="~/fsdp-workshop", help="the form's default course folder")
    args = ap.parse_args(argv)
    try:
        files = render_app(args.profile, args.out, args.cluster, args.course_dir)
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
