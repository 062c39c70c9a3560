"""The cluster's conda env (bloom_env.yml) installs exactly what pyproject.toml pins, and the course
kernel registers against the environment's own python.

A drift between the two files means students on the cluster run other versions than the ones the
tests and the benchmarks measured; these tests fail on the first such difference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
ENV_FILE = ROOT / "bloom_env.yml"
PYPROJECT = ROOT / "pyproject.toml"


# Extras only the developers' machines install: `make mutation` mutates the package and reruns the suite for
# hours, which no cluster node does, so the cluster's environment does not carry its tool.
DEVELOPER_EXTRAS = {"mutation"}


def pyproject_pins(text: str) -> dict[str, str]:
    """{name: version} for every `==` requirement, dependencies and optional extras alike (but the
    developers' own, DEVELOPER_EXTRAS)."""
    project = tomllib.loads(text)["project"]
    reqs = list(project["dependencies"])
    for name, extra in project.get("optional-dependencies", {}).items():
        if name not in DEVELOPER_EXTRAS:
            reqs += extra
    pins: dict[str, str] = {}
    for line in reqs:
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"pyproject.toml: {line!r} is not an exact pin"
        pins[canonicalize_name(req.name)] = specs[0].version
    return pins


def env_pins(text: str) -> dict[str, str]:
    """{name: version} for the conda and pip packages of a conda environment file."""
    env = yaml.safe_load(text)
    pins: dict[str, str] = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for line in dep.get("pip", []):
                if line.startswith("-") or line == ".":   # --extra-index-url; the course package itself
                    continue
                req = Requirement(line)
                specs = list(req.specifier)
                assert len(specs) == 1 and specs[0].operator == "==", f"bloom_env.yml: {line!r} is not an exact pin"
                pins[canonicalize_name(req.name)] = specs[0].version
        else:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:=+(.+))?", dep)
            assert m, f"bloom_env.yml: cannot read conda dependency {dep!r}"
            if m.group(2):
                pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def pin_differences(pyproject_text: str, env_text: str) -> list[str]:
    """Each pin of pyproject.toml that the env file lacks or pins to another version."""
    want, have = pyproject_pins(pyproject_text), env_pins(env_text)
    out = []
    for name, version in sorted(want.items()):
        if name not in have:
            out.append(f"{name}=={version} is pinned in pyproject.toml but missing from bloom_env.yml")
        elif have[name] != version:
            out.append(f"{name}: pyproject.toml pins {version}, bloom_env.yml {have[name]}")
    return out


def test_bloom_env_pins_equal_pyproject_pins() -> None:
    assert pin_differences(PYPROJECT.read_text(), ENV_FILE.read_text()) == []


def test_bloom_env_is_the_course_env() -> None:
    env = yaml.safe_load(ENV_FILE.read_text())
    assert env["name"] == "bloom_env"
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "." in pip, "the course package itself must be installed, or `import workshop` fails"
    assert "-e ." not in pip, "the students' install is not editable (issue 48: tests/test_student_install.py)"
    index = [x for x in pip if x.startswith("--extra-index-url")]
    assert index and re.search(r"download\.pytorch\.org/whl/cu\d+$", index[0]), "torch must be the CUDA build"


@pytest.mark.parametrize("edit", [
    ("torch==2.13.0", "torch==2.12.0"),               # a version drifts
    ("      - nbgrader==0.9.6\n", ""),                   # a package goes missing
    ("numpy==2.4.6", "numpy>=2.4"),                   # a pin is loosened
])
def test_a_drift_is_caught(edit: tuple[str, str]) -> None:
    """The check above is not vacuous: each kind of drift in a copy of the env file is reported."""
    text = ENV_FILE.read_text()
    assert edit[0] in text
    changed = text.replace(edit[0], edit[1])
    try:
        problems = pin_differences(PYPROJECT.read_text(), changed)
    except AssertionError as e:                        # "is not an exact pin"
        problems = [str(e)]
    assert problems, f"editing {edit[0]!r} -> {edit[1]!r} went unnoticed"


def test_a_new_pyproject_pin_must_reach_the_env_file() -> None:
    text = PYPROJECT.read_text().replace('"pytest==9.2.0"', '"pytest==9.2.0", "selenium==4.52.0"')
    assert pin_differences(text, ENV_FILE.read_text()) == [
        "selenium==4.52.0 is pinned in pyproject.toml but missing from bloom_env.yml"]


def _register(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "data"), PYTHON=sys.executable)
    env.pop("WORKSHOP_PROFILE", None)
    return subprocess.run(["bash", str(ROOT / "scripts" / "register_kernel.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_register_kernel_writes_a_spec_for_this_python(tmp_path: Path) -> None:
    """`--prefix`: the spec runs the environment's python and carries the site's variables."""
    out = _register(tmp_path, "--profile", "example-hpc", "--prefix", str(tmp_path / "prefix"))
    assert out.returncode == 0, out.stderr
    spec = json.loads((tmp_path / "prefix/share/jupyter/kernels/fsdp-workshop/kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    assert "ipykernel_launcher" in spec["argv"]
    assert spec["display_name"] == "FSDP workshop (bloom_env)"
    assert spec["env"] == {"WORKSHOP_PROFILE": "example-hpc", "HF_HOME": "/shared/fsdp-workshop/hf_home",
                           "WANDB_MODE": "offline"}


def test_register_kernel_for_the_user_is_found_by_jupyter(tmp_path: Path) -> None:
    """The default (`--user`) lands where Jupyter looks (JUPYTER_DATA_DIR), and a rerun replaces it."""
    for _ in range(2):
        out = _register(tmp_path)
        assert out.returncode == 0, out.stderr
    from jupyter_client.kernelspec import KernelSpecManager
    ksm = KernelSpecManager(data_dir=str(tmp_path / "data"), kernel_dirs=[str(tmp_path / "data" / "kernels")])
    spec = ksm.get_kernel_spec("fsdp-workshop")
    assert spec.argv[0] == sys.executable and spec.display_name == "FSDP workshop (bloom_env)"
    assert spec.env == {}                                       # no profile named: nothing site-specific


# ---------------------------------------------------------------------------------- the supported range

def supported() -> dict[str, str]:
    """pyproject.toml's [tool.workshop.supported]: the versions the course also runs on, and the report behind them."""
    return tomllib.loads(PYPROJECT.read_text())["tool"]["workshop"]["supported"]


def test_the_supported_range_holds_the_pins_and_is_backed_by_its_report() -> None:
    """The range's lower ends are the versions the compatibility report (scripts/compat_check.sh) ran and
    passed with; its upper ends are the pins, which the suite runs."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    rng = supported()
    report = json.loads((ROOT / rng["report"]).read_text())
    assert report["passed"] is True, f"{rng['report']} did not pass: the range it backs is not supported"
    pins = pyproject_pins(PYPROJECT.read_text())
    for name in ("torch", "transformers", "accelerate"):
        spec = SpecifierSet(rng[name])
        assert spec.contains(pins[name]), f"pyproject pins {name}=={pins[name]} outside its range {rng[name]}"
        ran = Version(report["versions"][name]).base_version              # 2.11.0+cu130 -> 2.11.0
        assert spec.contains(ran), f"{rng['report']} ran {name} {ran}, outside the range {rng[name]}"
        lower = [s.version for s in spec if s.operator == ">="]
        assert not lower or Version(lower[0]) == Version(ran), f"{name}: the range starts at {lower[0]}, " \
            f"the report ran {ran}: a lower end no report ran is not supported"


def test_bloom_env_states_the_same_range() -> None:
    rng = supported()
    lines = ENV_FILE.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("# Supported range: "))
    line = " ".join(lines[at:at + 2])
    for name in ("torch", "transformers", "accelerate"):
        assert f"{name} {rng[name]}" in line, f"bloom_env.yml's range line lacks `{name} {rng[name]}`: {line}"
    assert Path(rng["report"]).with_suffix(".md").as_posix() in line
