"""The Open OnDemand app, rendered for a site: its form offers the site's partitions, account and
reservation; its job script starts JupyterLab in the course folder with the course kernel; and the
session it starts really accepts OOD's Connect button (password posted to /node/<host>/<port>/login).

Open OnDemand evaluates the ERB at launch; here `erb_sample` stands in for it with sample values
(both branches of every `<%- if %>` kept), which is enough to parse the YAML and `bash -n` the scripts.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from workshop.site.ood import FILES, render_app
from workshop.slurm.ports import rendezvous_port

SAMPLE = {  # what OOD's context holds at launch (ERB expression -> value)
    "partition": "gpu_a100", "reservation.to_s.strip": "fsdp-workshop", "context.course_dir.to_s.strip.shellescape":
    "\\~/fsdp-workshop", "host": "node042", "port": "8888", "password": "s3cret"}


def erb_sample(text: str, values: dict[str, str] | None = None) -> str:
    """ERB with sample values: `<%= expr %>` -> value (an unknown expression -> "X"), control lines dropped."""
    values = SAMPLE if values is None else values
    text = re.sub(r"^[ \t]*<%-.*?-%>\n", "", text, flags=re.M)
    text = re.sub(r"<%#.*?%>\n?", "", text, flags=re.S)
    return re.sub(r"<%=\s*(.*?)\s*-?%>", lambda m: values.get(m.group(1), "X"), text)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ood-example-hpc")
    render_app("example-hpc", out)
    return out


def _site_profile(tmp: Path, **changes: str) -> Path:
    """example-hpc with other account / reservation / GPU request, as a site's own file."""
    text = (Path(__file__).resolve().parent.parent / "slurm/profiles/example-hpc.toml").read_text()
    for key, value in changes.items():
        text = re.sub(rf"^{key} = .*$", f'{key} = "{value}"', text, count=1, flags=re.M)
    path = tmp / "mysite.toml"
    path.write_text(text)
    return path


def test_the_app_has_every_batch_connect_file(app: Path) -> None:
    for rel in FILES:
        assert (app / rel).is_file(), rel
        assert "@{" not in (app / rel).read_text(), f"{rel}: a placeholder was left unrendered"
    manifest = yaml.safe_load((app / "manifest.yml").read_text())
    assert manifest["role"] == "batch_connect" and manifest["category"] == "Interactive Apps"


def test_the_form_offers_the_sites_session_partition_and_defaults(app: Path) -> None:
    text = (app / "form.yml.erb").read_text()
    assert "<%" not in text, "the form is fully rendered: OOD has nothing left to evaluate"
    form = yaml.safe_load(text)
    assert form["cluster"] == "example-hpc"
    assert form["form"] == ["course_dir", "partition", "bc_account", "reservation", "session_minutes"]
    attrs = form["attributes"]
    options = attrs["partition"]["options"]
    assert [o[1] for o in options] == ["interactive"]                      # the CPU partition only: no GPU node
    assert attrs["partition"]["value"] == "interactive"                    # [ood] partition
    assert attrs["bc_account"]["value"] == "CHANGE-ME-account"
    assert attrs["reservation"]["value"] == ""                             # [ood] reservation
    minutes = attrs["session_minutes"]                 # the profile's 00:20:00 in the form's 15-minute steps
    assert (minutes["value"], minutes["min"], minutes["step"], minutes["max"]) == (30, 15, 15, 720)
    assert {"data-max-session-minutes": 720} in options[0]                # interactive's MaxTime is 12 h
    assert "gpu_type" not in attrs and "num_gpus" not in attrs


def test_a_sites_own_account_and_reservation_reach_form_and_submit(tmp_path: Path) -> None:
    """[slurm] reservation is the class's, for the jobs; the form offers [ood]'s, one that holds the session
    partition's nodes (the jobs' GPU reservation would not take a session)."""
    profile = _site_profile(tmp_path, account="proj-4711", reservation="fsdp-day1")
    profile.write_text(profile.read_text().replace('reservation = ""                        # only one',
                                                   'reservation = "fsdp-sessions"          # only one'))
    render_app(profile, tmp_path / "app", cluster="mycluster")
    form = yaml.safe_load((tmp_path / "app/form.yml.erb").read_text())
    assert form["cluster"] == "mycluster"
    assert form["attributes"]["bc_account"]["value"] == "proj-4711"
    assert form["attributes"]["reservation"]["value"] == "fsdp-sessions"
    submit = yaml.safe_load(erb_sample((tmp_path / "app/submit.yml.erb").read_text()))
    assert "--reservation=fsdp-workshop" in submit["script"]["native"]      # the form's value at launch
    script = (tmp_path / "app/template/script.sh.erb").read_text()
    assert f"export WORKSHOP_PROFILE={profile}" in script       # a site file is named by its path


def test_submit_uses_the_basic_template_and_native_sbatch_args(app: Path) -> None:
    submit = yaml.safe_load(erb_sample((app / "submit.yml.erb").read_text()))
    assert submit["batch_connect"]["template"] == "basic"
    native = submit["script"]["native"]
    assert native[0] == "--partition=gpu_a100"                            # the form's value (SAMPLE), as given
    assert "--reservation=fsdp-workshop" in native
    assert all(isinstance(x, str) and x.startswith("--") for x in native)


def test_sessions_stay_off_the_gpu_nodes_and_leave_notebook_03_its_node(app: Path, tmp_path: Path) -> None:
    """The example site's rendered form and submit files: a session asks the CPU partition for a notebook
    kernel's 2 cores and 4 GB, no GPU; 20 sessions then take nothing of the partition notebook 03's
    4-GPU job runs on, whose whole-node request (4 x 40G of a 180G node) still fits there."""
    from tests.test_site_scripts import sbatch, site_script
    from workshop.slurm.profiles import load_profile, mem_mb

    form = yaml.safe_load((app / "form.yml.erb").read_text())
    partition = form["attributes"]["partition"]["value"]
    launched = {**SAMPLE, "partition": partition}             # the student presses Launch with the form's default
    native = yaml.safe_load(erb_sample((app / "submit.yml.erb").read_text(), launched))["script"]["native"]
    session = dict(x.removeprefix("--").split("=", 1) for x in native)
    assert session["partition"] == "interactive" and session["cpus-per-task"] == "2" and session["mem"] == "4096M"
    assert not any(k.startswith(("gpus", "gres")) for k in session)        # no GPU asked, at any count
    site = load_profile("example-hpc")
    gpu_names = {p.name for p in site.partitions.values() if p.gpus_per_node}
    assert set(o[1] for o in form["attributes"]["partition"]["options"]).isdisjoint(gpu_names)

    job = sbatch(site_script("strategies", tmp_path))                       # notebook 03's full-node job
    node = site.partition_for("strategies")
    assert job["gpus-per-node"] == "v100:4" and job["mem"] == "160G"
    sessions = 20
    taken_on_03s_partition = sessions * mem_mb(session["mem"]) if session["partition"] == job["partition"] else 0
    assert taken_on_03s_partition == 0
    assert mem_mb(job["mem"]) <= mem_mb(node.mem_per_node) - taken_on_03s_partition
    # and the sessions themselves fit their partition: 20 x 4G on 250G nodes, 2 cores each
    assert sessions * mem_mb(session["mem"]) <= 2 * mem_mb(site.partitions["interactive"].mem_per_node)


def test_a_gpu_partition_is_refused_for_sessions() -> None:
    from workshop.slurm.profiles import ProfileError, parse_profile

    parts = {"gpu": {"name": "gpu", "gpus_per_node": 4}, "cpu": {"name": "cpu", "gpus_per_node": 0, "mem_per_node": "8G"}}
    with pytest.raises(ProfileError, match=r"ood\.partition.*GPU partition.*Fix: name a CPU or interactive"):
        parse_profile({"slurm": {"partitions": parts}, "ood": {"partition": "gpu"}}, "t.toml", "t")
    with pytest.raises(ProfileError, match=r"ood\.mem.*more than a node"):
        parse_profile({"slurm": {"partitions": parts}, "ood": {"partition": "cpu", "mem": "16G"}}, "t.toml", "t")
    no_sessions = parse_profile({"slurm": {"partitions": parts}}, "t.toml", "t")
    with pytest.raises(ProfileError, match=r"ood\.partition.*names no partition"):
        render_app(no_sessions, "/nonexistent-never-written")


def test_the_scripts_carry_the_sites_environment(app: Path) -> None:
    script = (app / "template/script.sh.erb").read_text()
    assert 'exec jupyter lab --config="${CONFIG_FILE}" --ServerApp.root_dir="${COURSE_DIR}"' in script
    assert 'cd "${COURSE_DIR}"' in script
    assert 'python -m workshop.student.kernel --profile "${WORKSHOP_PROFILE}"' in script
    for line in ("module load anaconda3", "conda activate /shared/fsdp-workshop/bloom_env", "export WORKSHOP_PROFILE=example-hpc",
                 "export HF_HOME=/shared/fsdp-workshop/hf_home", "export HF_HUB_OFFLINE=1", "export WANDB_MODE=offline"):
        assert line in script.splitlines()
    before = (app / "template/before.sh.erb").read_text()
    for line in ("c.ServerApp.ip = '*'", "c.ServerApp.base_url = '/node/${host}/${port}/'",
                 "c.MappingKernelManager.default_kernel_name = 'fsdp-workshop'", "port=$(find_port ${host})",
                 'password="$(create_passwd 16)"', 'export CONFIG_FILE="${PWD}/config.py"',
                 "c.LabApp.news_url = None"):
        assert line in before.splitlines()
    view = (app / "view.html.erb").read_text()
    assert 'action="/node/<%= host %>/<%= port %>/login"' in view and 'name="password"' in view


def test_the_form_never_offers_more_than_the_partition_allows(tmp_path: Path) -> None:
    """A 30-minute interactive partition: the form offers 15 or 30, and submit.yml turns the choice into
    the job's --time (OOD's wall_time, in seconds)."""
    profile = _site_profile(tmp_path)
    profile.write_text(profile.read_text().replace('max_time = "12:00:00"', 'max_time = "00:30:00"'))
    render_app(profile, tmp_path / "app")
    form = yaml.safe_load((tmp_path / "app/form.yml.erb").read_text())
    minutes = form["attributes"]["session_minutes"]
    assert (minutes["value"], minutes["min"], minutes["max"]) == (30, 15, 30)
    assert {"data-max-session-minutes": 30} in form["attributes"]["partition"]["options"][0]
    submit = yaml.safe_load(erb_sample((tmp_path / "app/submit.yml.erb").read_text(),
                                       {**SAMPLE, "session_minutes.to_i * 60": "1800"}))
    assert submit["script"]["wall_time"] == 1800


@pytest.mark.parametrize("rel", ["template/script.sh.erb", "template/before.sh.erb"])
def test_the_scripts_are_valid_bash(app: Path, rel: str, tmp_path: Path) -> None:
    path = tmp_path / Path(rel).name.removesuffix(".erb")
    path.write_text(erb_sample((app / rel).read_text()))
    assert "<%" not in path.read_text()
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_a_session_accepts_the_connect_button(tmp_path: Path) -> None:
    """before.sh + script.sh as OOD runs them (its helpers stubbed, loopback only): the view's form
    logs in behind /node/<host>/<port>/, and the server offers the course kernel by default; the student's
    Lab loads none of nbgrader's instructor tools, and its terminal runs the course's python. The
    profile has no [env] setup and the session starts with OOD's --export=NONE environment (no course
    Python on PATH): the app activates the course environment it was rendered from."""
    home = tmp_path / "home"
    (home / "fsdp-workshop").mkdir(parents=True)
    profile = _site_profile(tmp_path)
    text = profile.read_text()
    profile.write_text(re.sub(r"^setup = \[.*?\]\n", "", text, count=1, flags=re.M | re.S))
    assert "setup" not in profile.read_text().split("[env]")[1].split("[")[0]
    app = tmp_path / "app"
    render_app(profile, app)
    session = tmp_path / "session"
    session.mkdir()
    port = rendezvous_port()  # below the ephemeral range: slurm/ports.py
    (session / "before.sh").write_text(erb_sample((app / "template/before.sh.erb").read_text()))
    (session / "script.sh").write_text(erb_sample((app / "template/script.sh.erb").read_text()))
    shutil.copy(app / "template/terminal.bashrc", session)        # OOD copies the template folder as is
    # OOD's basic template: helpers, then before.sh sourced, then script.sh; every server on 127.0.0.1 here
    runner = f"""set -e
        host=127.0.0.1
        find_port() {{ echo {port}; }}
        create_passwd() {{ tr -dc A-Za-z0-9 < /dev/urandom | head -c "$1"; }}
        source ./before.sh
        sed -i "s/^c.ServerApp.ip = '\\*'/c.ServerApp.ip = '127.0.0.1'/" "$CONFIG_FILE"
        [ "$(id -u)" = 0 ] && echo "c.ServerApp.allow_root = True" >> "$CONFIG_FILE"
        printf '%s' "$password" > password
        exec bash ./script.sh"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "WORKSHOP", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), USER="student", PATH="/usr/bin:/bin", SHELL="/bin/bash")
    # the student's own login file puts the system's folders first, as many do
    (home / ".bash_profile").write_text('export PATH="/usr/local/bin:/usr/bin:/bin:$PATH"\n')
    log = open(session / "output.log", "wb")
    proc = subprocess.Popen(["bash", "-c", runner], cwd=session, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}/node/127.0.0.1/{port}"
    try:
        deadline = time.monotonic() + 180           # a condition (the server answers); a bound on a hang only
        while True:
            assert proc.poll() is None, (session / "output.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{base}/api/status", timeout=2)
            except urllib.error.HTTPError:
                break                                   # 403 without a login: it is up, and it is locked
            except OSError:
                assert time.monotonic() < deadline, (session / "output.log").read_text()[-3000:]
                time.sleep(0.3)
        # the Connect button: the view's form, posted with the session's password
        view = erb_sample((app / "view.html.erb").read_text(), {**SAMPLE, "host": "127.0.0.1", "port": str(port),
                                                                   "password": (session / "password").read_text()})
        fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', view))
        action = re.search(r'action="([^"]+)"', view).group(1)
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        page = opener.open(f"http://127.0.0.1:{port}{action}", data=urllib.parse.urlencode(fields).encode(), timeout=20)
        assert page.url.endswith(f"/node/127.0.0.1/{port}/lab"), page.url
        # no news prompt over the notebook: JupyterLab's announcements plugin asks whenever the effective
        # fetchNews is "none" (its default); the session's override makes it "false", as the server reports it
        notification = json.load(opener.open(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification",
                                             timeout=20))
        effective = {**{k: v.get("default") for k, v in notification["schema"]["properties"].items()},
                     **notification["settings"]}
        assert effective["fetchNews"] == "false" and effective["checkForUpdates"] is False, notification["settings"]
        specs = json.load(opener.open(f"{base}/api/kernelspecs", timeout=20))
        assert specs["default"] == "fsdp-workshop"
        spec = specs["kernelspecs"]["fsdp-workshop"]["spec"]
        assert spec["display_name"] == "FSDP workshop (bloom_env)" and spec["argv"][0].startswith(sys.prefix)
        _student_lab_has_no_instructor_tools(opener, base)
        _a_terminal_runs_the_course_python(jar, base)
        contents = json.load(opener.open(f"{base}/api/contents", timeout=20))
        assert contents["path"] == "" and (home / "fsdp-workshop").is_dir()
        assert f"starting JupyterLab in {home / 'fsdp-workshop'}" in (session / "output.log").read_text()
        wrong = dict(fields, password="wrong")
        denied = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with pytest.raises(urllib.error.HTTPError):
            denied.open(f"http://127.0.0.1:{port}{action}", data=urllib.parse.urlencode(wrong).encode(), timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


INSTRUCTOR_LAB = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"}
EXCHANGE_LAB = {"@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:validate-assignment"}


def _page_config(before: str) -> dict:
    return json.loads(before.split('labconfig/page_config.json" << \'EOL\'\n', 1)[1].split("\nEOL", 1)[0])


@pytest.mark.parametrize("exchange", [False, True])
def test_the_rendered_app_disables_the_instructor_extensions(exchange: bool, tmp_path: Path) -> None:
    """Issue 54, point 2: the formgrader, Create Assignment and the course list never load in a student's Lab,
    neither their JupyterLab plugins nor their server side; the assignment list and Validate stay where the site
    uses nbgrader's exchange."""
    profile = _site_profile(tmp_path)
    profile.write_text(profile.read_text().replace("exchange = false", f"exchange = {str(exchange).lower()}"))
    render_app(profile, tmp_path / "app")
    before = (tmp_path / "app/template/before.sh.erb").read_text()
    off = {k for k, v in _page_config(before)["disabledExtensions"].items() if v}
    assert INSTRUCTOR_LAB <= off
    assert EXCHANGE_LAB.isdisjoint(off) if exchange else EXCHANGE_LAB <= off
    server = re.search(r"^c\.ServerApp\.jpserver_extensions\.update\((\{.*\})\)$", before, flags=re.M).group(1)
    server_off = {k for k, v in eval(server).items() if v is False}      # a Python dict literal in config.py
    assert {"nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"} <= server_off
    assert ("nbgrader.server_extensions.assignment_list" in server_off) is not exchange


def _student_lab_has_no_instructor_tools(opener: urllib.request.OpenerDirector, base: str) -> None:
    """The live session: the Lab page's config lists nbgrader's instructor plugins as disabled, and the
    formgrader's pages are not served (its server extension did not load)."""
    page = opener.open(f"{base}/lab", timeout=20).read().decode()
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, flags=re.S).group(1))
    assert INSTRUCTOR_LAB <= set(config["disabledExtensions"]), config["disabledExtensions"]
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(f"{base}/formgrader", timeout=20)
    assert err.value.code == 404


def _a_terminal_runs_the_course_python(jar: http.cookiejar.CookieJar, base: str) -> None:
    """Issue 54, point 1: a JupyterLab terminal of the session (through the server's own terminal API and
    websocket, as the Lab's Terminal tab talks to it) resolves python, workshop and jupyter to the course's
    environment, after the login files ran (the student's .bash_profile put /usr/bin first)."""
    import websocket

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    req = urllib.request.Request(f"{base}/api/terminals", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    name = json.load(opener.open(req, timeout=20))["name"]
    cookie = "; ".join(f"{c.name}={c.value}" for c in jar)
    ws = websocket.create_connection(f"{base.replace('http', 'ws', 1)}/terminals/websocket/{name}", timeout=60,
                                     cookie=cookie, suppress_origin=True)
    ws.settimeout(2)
    try:
        # the answer, between markers: each path, or "none" where the shell found no such command
        ws.send(json.dumps(["stdin", "for c in python workshop jupyter; do printf '@@%s' \"$(command -v $c || echo none)\"; "
                                     "done; echo '@@end'\r"]))
        seen, deadline = "", time.monotonic() + 60
        while not (found := re.search(r"@@(\S+)@@(\S+)@@(\S+)@@end", seen)):
            assert time.monotonic() < deadline, f"the terminal printed: {seen[-2000:]!r}"
            try:
                msg = json.loads(ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            if msg[0] == "stdout":
                seen += msg[1]
    finally:
        ws.close()
    course_bin = str(Path(sys.executable).parent)
    assert [str(Path(p).parent) for p in found.groups()] == [course_bin] * 3, (found.groups(), seen[-2000:])
