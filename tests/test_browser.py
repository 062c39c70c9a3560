"""What the student sees: notebook 01 in a real JupyterLab, in a real (headless) Chromium.

The student's first cells (up to the one that submits and watches the job) run through JupyterLab's
own "Run > Run All Above Selected Cell" menu, clicked with the mouse; the job runs on the local backend: while it
runs, `Job.wait()`'s ipywidgets status widget shows its steps, and when it ends the plain job table takes the
widget's place, showing COMPLETED. Then the student saves (Ctrl+S), the kernel shuts down and the notebook is
opened again: no "Error displaying widget: model not found", the table is still there. The Lab is configured as
the Open OnDemand app configures a student's: no Nbgrader menu, no Create Assignment sidebar. A screenshot lands in `test-artifacts/browser-01_baseline.png`
for a person to look at.

Chromium is Debian's (scripts/install_browser.sh installs it as root); the test talks to it over
the DevTools protocol with websocket-client (already a jupyter_server dependency), so neither
chromedriver nor selenium is needed. Every server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from workshop.slurm.ports import rendezvous_port

ROOT = Path(__file__).resolve().parent.parent
STUDENT_DIR = ROOT / "notebooks" / "01_baseline"
NOTEBOOK = STUDENT_DIR / "01_baseline.ipynb"
ARTIFACT = ROOT / "test-artifacts" / "browser-01_baseline.png"
# Waits are for conditions, each bounded on its own: a step of the page that has not happened after STEP_S
# is lost (an event, a click), not slow; the job cell trains a model, which a busy machine may slow several
# times over. How long the test takes is printed, never asserted: a timed test measures its neighbours.
STEP_S = 120.0
JOB_S = 600.0
# JupyterLab's own settings for the test's user: no "get notified about Jupyter news?" toast
# and the notebook's own kernel starts without a "Select Kernel" dialog ("Always start the preferred kernel")
LAB_SETTINGS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings":
                {"fetchNews": "false", "checkForUpdates": False},
                "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"autoStartDefaultKernel": True}}
# what the test puts in the notebook's parameters, as papermill would: a job small enough for 90 s
SMALL_RUN = "dict(train_size=8, eval_size=4, epochs=1, eval_generate=False)"
JOB_CELL = ("submit(", ".run(", ".wait(")     # the first code cell with one of these starts the job


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a process we started in its own session, and everything it started there."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def chromium() -> str:
    """Path of Debian's chromium, installed first when this test runs as root."""
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0:
        subprocess.run(["bash", str(ROOT / "scripts" / "install_browser.sh")], check=True, timeout=600)
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("needs Debian's chromium and this is not root: "
                    "run `sudo bash scripts/install_browser.sh`, or run the tests as root")
    return found


def _standin_notebook() -> dict[str, Any]:
    """Until notebooks/01_baseline exists: the cells the real notebook starts with."""
    def cell(kind: str, source: str, n: int) -> dict[str, Any]:
        c: dict[str, Any] = {"cell_type": kind, "id": f"standin-{n}", "metadata": {}, "source": source}
        if kind == "code":
            c.update(outputs=[], execution_count=None)
        return c
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "fsdp-workshop", "display_name": "FSDP workshop (bloom_env)",
                                        "language": "python"}},
            "cells": [cell("markdown", "# 01 Baseline (stand-in until the release notebook exists)", 0),
                      cell("code", "from workshop.slurm import submit", 1),
                      cell("code", f'job = submit("baseline", profile="local", overrides={SMALL_RUN})\njob.wait()', 2),
                      cell("markdown", "The rest of notebook 01 follows here.", 3)]}


def _small_parameters(path: Path) -> None:
    """After the cell tagged `parameters`, a cell that makes the job small, as papermill injects one."""
    nb = json.loads(path.read_text())
    for i, c in enumerate(nb["cells"]):
        if "parameters" in c.get("metadata", {}).get("tags", []):
            nb["cells"].insert(i + 1, {"cell_type": "code", "id": "injected-parameters", "execution_count": None,
                                       "metadata": {"tags": ["injected-parameters"]}, "outputs": [],
                                       "source": f"overrides = {SMALL_RUN}  # tests/test_browser.py: a small job"})
            path.write_text(json.dumps(nb, indent=1))
            return


def _answers_filled_in(path: Path) -> None:
    """A student who did the work: each answer cell above the job cell holds the solution's code (the
    graded predictions come before the run, and a stub's NotImplementedError would stop Run All)."""
    nb = json.loads(path.read_text())
    solved = {c["id"]: c["source"] for c in json.loads((ROOT / "solutions" / "01_baseline" / NOTEBOOK.name).read_text())["cells"]}
    for c in nb["cells"][:_job_cell(path)]:
        if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution"):
            c["source"] = solved[c["id"]]
    path.write_text(json.dumps(nb, indent=1))


def _job_cell(path: Path) -> int:
    """Index of the cell that submits and watches the job (the test runs every cell up to it)."""
    cells = json.loads(path.read_text())["cells"]
    for i, c in enumerate(cells):
        source = "".join(c["source"])
        if c["cell_type"] == "code" and any(k in source for k in JOB_CELL):
            assert i + 1 < len(cells), "the job cell is the notebook's last cell"
            return i
    raise AssertionError(f"{path.name} has no cell that starts a job ({' / '.join(JOB_CELL)})")


def _course_copy(tmp: Path) -> Path:
    """A temp copy of the student's course folder; returns the notebook's path inside it."""
    course = tmp / "course"
    if STUDENT_DIR.exists():
        assert NOTEBOOK.is_file(), f"{STUDENT_DIR} exists but has no {NOTEBOOK.name}: regenerate the release"
        shutil.copytree(ROOT / "notebooks", course / "notebooks",
                        ignore=shutil.ignore_patterns("jobs", "tables", "plots", ".ipynb_checkpoints"))
        _small_parameters(course / "notebooks" / "01_baseline" / NOTEBOOK.name)
        _answers_filled_in(course / "notebooks" / "01_baseline" / NOTEBOOK.name)
    else:
        (course / "notebooks" / "01_baseline").mkdir(parents=True)
        (course / "notebooks" / "01_baseline" / "01_baseline.ipynb").write_text(json.dumps(_standin_notebook()))
    return course / "notebooks" / "01_baseline" / "01_baseline.ipynb"


class DevTools:
    """The few Chrome DevTools protocol calls this test needs, over one page's websocket."""

    def __init__(self, ws_url: str) -> None:
        import websocket
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JS error in {expression[:80]!r}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def click(self, x: float, y: float) -> None:
        """A real mouse click (press and release), as Lumino menus only listen to mouse events."""
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self) -> None:
        self.ws.close()


def _wait_for(what: str, probe: Any, timeout: float = STEP_S, interval: float = 0.25) -> Any:
    start = time.monotonic()
    while True:
        value = probe()
        if value:
            print(f"[browser] {what}: done in {time.monotonic() - start:.1f} s", flush=True)
            return value
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _center_of(dev: DevTools, selector: str, text: str) -> tuple[float, float] | None:
    """Centre of the first visible element matching `selector` whose text is `text`."""
    return dev.js(f"""(() => {{
        for (const el of document.querySelectorAll({json.dumps(selector)})) {{
            const r = el.getBoundingClientRect();
            if (el.textContent.trim() === {json.dumps(text)} && r.width > 0)
                return [r.x + r.width / 2, r.y + r.height / 2];
        }}
        return null; }})()""")


def _student_lab_as_the_ood_app_sets_it(jconf: Path, tmp: Path) -> None:
    """The student's Lab of the Open OnDemand app (rendered here for example-hpc): its page config and server
    extensions, with nbgrader's instructor tools off, in this server's own Jupyter config folder."""
    import re

    from tests.test_ood import _page_config
    from workshop.site.ood import render_app

    render_app("example-hpc", tmp / "ood-app")
    before = (tmp / "ood-app" / "template" / "before.sh.erb").read_text()
    (jconf / "labconfig").mkdir(parents=True, exist_ok=True)
    (jconf / "labconfig" / "page_config.json").write_text(json.dumps(_page_config(before)))
    server = re.search(r"^c\.ServerApp\.jpserver_extensions\.update\((\{.*\})\)$", before, flags=re.M).group(1)
    # its terminals: bash with the app's terminal.bashrc, as before.sh sets them
    assert "'--rcfile', '${PWD}/terminal.bashrc', '-i'" in before
    shutil.copy(tmp / "ood-app" / "template" / "terminal.bashrc", tmp / "terminal.bashrc")
    terminals = {"shell_command": [shutil.which("bash"), "--rcfile", str(tmp / "terminal.bashrc"), "-i"]}
    (jconf / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": eval(server), "terminado_settings": terminals}}))


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """JupyterLab on 127.0.0.1 (random port, a token) serving a temp course copy; (base, token, notebook)."""
    notebook = _course_copy(tmp_path)
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "jdata"), JUPYTER_CONFIG_DIR=str(tmp_path / "jconf"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jrun"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "jsettings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "jworkspaces"),
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env["WORKSHOP_PROFILE"] = "local"     # the notebook's `profile = None` means this site's profile
    # what the OOD app's script.sh exports after the site's setup: the course's PATH, for the terminals
    env["WORKSHOP_COURSE_PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    _student_lab_as_the_ood_app_sets_it(tmp_path / "jconf", tmp_path)
    for rel, value in LAB_SETTINGS.items():
        (tmp_path / "jsettings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "jsettings" / rel).write_text(json.dumps(value))
    # the course kernel, registered the way a student's environment gets it
    subprocess.run([sys.executable, "-m", "workshop.student.kernel", "--profile", "local"], env=env, check=True,
                   capture_output=True, timeout=60)
    port, token = rendezvous_port(), base64.b32encode(os.urandom(15)).decode().lower()
    log = open(tmp_path / "jupyterlab.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={notebook.parents[2]}", "--MappingKernelManager.default_kernel_name=fsdp-workshop",
         "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "jupyterlab.log").read_text()[-3000:]
            try:
                return urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).status == 200
            except OSError:
                return False
        _wait_for("JupyterLab to answer", up)
        yield base, token, notebook
    finally:
        _kill_group(proc)
        log.close()
        from workshop.slurm import Job
        for record in notebook.parent.glob("jobs/*/job.json"):     # a job the notebook left running
            try:
                Job.load(record.parent).cancel()
            except Exception:
                pass


@pytest.fixture
def browser(chromium: str, tmp_path: Path) -> Iterator[DevTools]:
    """Headless Chromium with DevTools on a random loopback port; one page to drive."""
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [chromium, "--no-sandbox", "--headless=new", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         "--window-size=1400,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "chromium.log", "wb"), start_new_session=True)
    dev = None
    try:
        port_file = profile / "DevToolsActivePort"
        _wait_for("chromium's DevTools port", lambda: port_file.is_file() and port_file.read_text().strip())
        port = int(port_file.read_text().split()[0])
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
        page = next(p for p in pages if p["type"] == "page")
        dev = DevTools(page["webSocketDebuggerUrl"])
        dev.call("Page.enable")
        dev.call("Runtime.enable")
        yield dev
    finally:
        if dev is not None:
            dev.close()
        _kill_group(proc)


def _screenshot(dev: DevTools) -> None:
    """Save the page as test-artifacts/browser-01_baseline.png, the widget in view when there is one."""
    dev.js("document.querySelector('.jp-Notebook .jp-OutputArea-output .widget-html')"
           "?.scrollIntoView({block: 'center'})")
    time.sleep(0.3)
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_bytes(base64.b64decode(dev.call("Page.captureScreenshot", format="png")["data"]))


# "no dialog" once a kernel runs without asking; the offered kernel's name while the dialog is up
KERNEL_DIALOG_JS = """(() => {
    const sel = document.querySelector('.jp-Dialog select');
    if (sel) return sel.options[sel.selectedIndex]?.textContent.trim() || '(none selected)';
    return /Idle|Busy/.test(document.querySelector('#jp-main-statusbar')?.textContent || '') ? 'no dialog' : null;
})()"""


# the job table widget (workshop.slurm.watch): its first row's text, and that row's <progress> value and max
WIDGET_STATE_JS = """(() => {
    const row = document.querySelector('.jp-Notebook .jp-OutputArea-output .widget-html table tr:nth-child(2)');
    if (!row) return null;
    const bar = row.querySelector('progress');
    return {head: row.textContent.trim(), bar: bar ? [bar.value, bar.max] : null}; })()"""


def test_notebook_01_runs_in_a_real_browser_and_shows_the_job_widget(lab: tuple[str, str, Path],
                                                                     browser: DevTools) -> None:
    """A student opens notebook 01, runs it, and sees the job's status widget reach COMPLETED."""
    start = time.monotonic()
    base, token, notebook = lab
    url = f"{base}/lab/tree/{notebook.relative_to(notebook.parents[2]).as_posix()}?token={token}"
    dev = browser
    try:
        dev.call("Page.navigate", url=url)
        _wait_for("the notebook to open", lambda: dev.js(
            "!!document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')"))
        # the notebook's kernel starts (were JupyterLab to ask which one, the student accepts the offer)
        expected = json.loads(notebook.read_text())["metadata"]["kernelspec"]["display_name"]

        def kernel_idle() -> bool:
            offered = dev.js("document.querySelector('.jp-Dialog select')?.selectedOptions[0]?.textContent")
            if offered:
                assert offered.strip() == expected, f"JupyterLab offers kernel {offered!r}, not {expected!r}"
                dev.click(*_center_of(dev, ".jp-Dialog button.jp-mod-accept", "Select"))
                return False
            sessions = json.load(urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5))
            return any(x["kernel"]["execution_state"] == "idle" for x in sessions)
        _wait_for("the kernel to be idle", kernel_idle)
        kernel_name = dev.js("document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) "
                             ".jp-KernelName')?.textContent")
        assert kernel_name == expected, f"the toolbar shows kernel {kernel_name!r}, not {expected!r}"
        # issue 54, point 2: a student's Lab has no Nbgrader menu and no Create Assignment sidebar
        menus = dev.js("[...document.querySelectorAll('.lm-MenuBar-item')].map(m => m.textContent.trim())")
        assert "Run" in menus and "Nbgrader" not in menus, menus
        sidebars = dev.js("[...document.querySelectorAll('.jp-SideBar .lm-TabBar-tab')].map(t => t.title || t.textContent)")
        assert not [t for t in sidebars if "Assignment" in t], sidebars
        tab = dev.js("document.querySelector('.lm-DockPanel-tabBar .lm-mod-current .lm-TabBar-tabLabel')"
                     "?.textContent")
        assert tab == notebook.name, f"the open tab is {tab!r}, not the notebook"

        # select the cell after the job cell, then Run > Run All Above Selected Cell, with the mouse
        after = _job_cell(notebook) + 1
        cell = f"document.querySelectorAll('.jp-Notebook .jp-Cell')[{after}]"

        def select_after() -> bool:
            # cells off screen render lazily (content-visibility), so the page moves while it scrolls:
            # measure after each scroll and click again until JupyterLab marks the cell active; a long
            # notebook adds its cells to the page over a moment, so wait until this one is there
            if not dev.js(f"!!{cell}"):
                time.sleep(0.3)
                return False
            if dev.js(f"{cell}.classList.contains('jp-mod-active')"):
                return True
            dev.js(f"{cell}.scrollIntoView({{block: 'center'}})")
            time.sleep(0.3)
            box = dev.js(f"""(() => {{ const r = {cell}.getBoundingClientRect();
                          return [r.x + 30, r.y + Math.min(10, r.height / 2)]; }})()""")
            dev.click(*box)
            return False
        _wait_for("the cell after the job cell to be selected", select_after, interval=0.5)
        run_menu = _wait_for("the Run menu", lambda: _center_of(dev, ".lm-MenuBar-item", "Run"))
        dev.click(*run_menu)
        run_above = _wait_for("'Run All Above Selected Cell'", lambda: _center_of(
            dev, ".lm-Menu-item .lm-Menu-itemLabel", "Run All Above Selected Cell"))
        dev.click(*run_above)

        widget_seen: list[dict[str, Any]] = []

        def table_done() -> str | None:
            state = dev.js(WIDGET_STATE_JS)
            if state:
                widget_seen.append(state)
            row = dev.js(TABLE_ROW_JS)
            if row and any(s in row for s in ("FAILED", "CANCELLED", "TIMEOUT")):
                raise AssertionError(f"the job did not complete: {row}")
            error = dev.js("document.querySelector('.jp-Notebook [data-mime-type=\"application/vnd.jupyter.stderr\"]"
                           " pre, .jp-Notebook .jp-RenderedText[data-mime-type*=\"error\"]')?.textContent")
            if error and "Traceback" in error:
                raise AssertionError(f"a cell raised:\n{error[-2000:]}")
            return row if row and "COMPLETED" in row else None

        row = _wait_for("the job's table to show COMPLETED", table_done, JOB_S, interval=0.5)
        assert "baseline" in row and "local-1" in row, row
        # while the job ran, the live widget showed it running (its steps as a progress bar, once the log has
        # one: 4 small steps may pass between two looks); when the watch ended the plain table took its place
        # (the widget's output is gone, not hidden)
        running = [w for w in widget_seen if "RUNNING" in w["head"]]
        assert running, f"the live widget never showed the job running: {widget_seen[-3:]}"
        assert all(w["bar"][0] <= w["bar"][1] for w in running if w["bar"]), running[-3:]
        assert not dev.js(WIDGET_STATE_JS), "the live widget is still in the job cell's output"
        _saved_and_reopened_without_dead_widgets(dev, base, token, notebook)
    finally:
        _screenshot(dev)     # on failure too: the picture says what the student would see
    assert ARTIFACT.stat().st_size > 10_000
    print(f"[browser] notebook 01 opened, run, its job COMPLETED, saved and reopened in {time.monotonic() - start:.0f} s")


# the plain job table (workshop.slurm.job_table) in the notebook: its first row's text
TABLE_ROW_JS = """(() => {
    const row = document.querySelector('.jp-Notebook .jp-OutputArea-output table.workshop-jobs tr:nth-child(2)');
    return row ? row.textContent.trim() : null; })()"""
# what JupyterLab writes where a saved widget's model is gone
DEAD_WIDGET_JS = """(() => [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')]
    .map(o => o.textContent).filter(t => /Error displaying widget|model not found/.test(t)).length)()"""


def _saved_and_reopened_without_dead_widgets(dev: DevTools, base: str, token: str, notebook: Path) -> None:
    """Issue 54, point 3: the student saves (File > Save Notebook), the kernel shuts down, the notebook is opened
    again: the job cell shows the plain table and no "Error displaying widget: model not found" (the saved file
    holds no widget output at all: what an instructor collects and what the feedback shows)."""
    dev.click(*_wait_for("the File menu", lambda: _center_of(dev, ".lm-MenuBar-item", "File")))
    dev.click(*_wait_for("'Save Notebook'", lambda: _center_of(dev, ".lm-Menu-item .lm-Menu-itemLabel", "Save Notebook")))

    def saved_with_table() -> bool:      # JupyterLab saves a multi-line value as a list of lines
        outputs = [o for c in json.loads(notebook.read_text())["cells"] for o in c.get("outputs", [])]
        return any('class="workshop-jobs"' in "".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    _wait_for("the notebook to be saved with its job table", saved_with_table)
    outputs = [o for c in json.loads(notebook.read_text())["cells"] for o in c.get("outputs", [])]
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets == [], f"the saved notebook keeps {len(widgets)} widget output(s): {widgets[:1]}"
    for session in json.load(urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5)):
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={token}",
                                                      method="DELETE"), timeout=30)
    dev.js("window.__beforeReload = true")     # gone once the page has really loaded again
    dev.call("Page.reload", ignoreCache=True)
    _wait_for("the notebook to open again", lambda: dev.js(
        "!window.__beforeReload && !!document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')"))
    _wait_for("the saved job table to show", lambda: dev.js(
        "(() => { const t = document.querySelector('.jp-Notebook table.workshop-jobs');"
        " t?.scrollIntoView({block: 'center'}); return !!t; })()"))
    time.sleep(2)      # a widget renderer reports a missing model at once; give it a moment all the same
    assert dev.js(DEAD_WIDGET_JS) == 0, "a reopened notebook shows 'Error displaying widget: model not found'"
    assert "COMPLETED" in (dev.js(TABLE_ROW_JS) or ""), dev.js(TABLE_ROW_JS)


def test_a_terminal_of_the_students_lab_runs_the_courses_python(lab: tuple[str, str, Path], browser: DevTools,
                                                                tmp_path: Path) -> None:
    """Issue 54, point 1, in Chromium: the student opens a terminal of their Lab and types; `python`, `workshop`
    and `jupyter` are the course's (a login shell had /etc/profile's PATH: "python: command not found")."""
    base, token, _ = lab
    dev = browser
    dev.call("Page.navigate", url=f"{base}/lab?token={token}")
    dev.click(*_wait_for("the Launcher's Terminal", lambda: _center_of(dev, ".jp-LauncherCard-label", "Terminal")))
    box = _wait_for("the terminal to open", lambda: dev.js(
        "(() => { const t = document.querySelector('.jp-Terminal:not(.lm-mod-hidden) .xterm-screen');"
        " if (!t) return null; const r = t.getBoundingClientRect();"
        " return r.width > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null; })()"))
    out = tmp_path / "which.txt"
    time.sleep(1)           # the shell's prompt
    dev.click(*box)
    dev.call("Input.insertText", text=f"command -v python workshop jupyter > {out}")
    for kind in ("keyDown", "keyUp"):
        dev.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                 **({"text": "\r"} if kind == "keyDown" else {}))
    _wait_for("the terminal's answer", lambda: out.is_file() and len(out.read_text().split()) == 3)
    course_bin = str(Path(sys.executable).parent)
    assert [str(Path(p).parent) for p in out.read_text().split()] == [course_bin] * 3, out.read_text()
