"""Every Slurm client call goes through the scrubbed runner (workshop.slurm.slurm_backend.run), as docs/design.md
promises: a call from inside a job (a student's JupyterLab session is one) must not carry that job's SLURM_*
options into sbatch or change what squeue and sacct print. Read from the source (AST), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "workshop"
RUNNER = ROOT / "slurm" / "slurm_backend.py"
SLURM = {"sbatch", "squeue", "sacct", "scontrol", "srun", "sinfo", "scancel", "salloc", "sacctmgr", "sprio", "sshare"}
SPAWN = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "system", "popen",
         "execvp", "execv", "spawnvp"}


def spawns(node: ast.AST) -> bool:
    """A call of subprocess.* or os.* that starts a process."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SPAWN
            and isinstance(node.func.value, ast.Name) and node.func.value.id in ("subprocess", "os"))


def names_slurm(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.split(" ")[0] in SLURM
               for n in ast.walk(node))


def direct_calls(path: Path) -> list[str]:
    """Process starts that name a Slurm command: in the call's own arguments, or anywhere in the function that
    makes it (an argv built first, then run)."""
    tree = ast.parse(path.read_text())
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = {f"{path.name}:{call.lineno}" for call in ast.walk(tree) if spawns(call) and names_slurm(call)}
    found |= {f"{path.name}:{call.lineno}" for scope in scopes for call in ast.walk(scope)
              if spawns(call) and names_slurm(scope)}
    return sorted(found)


def test_no_module_but_the_runner_starts_a_slurm_command() -> None:
    assert [c for p in sorted(ROOT.rglob("*.py")) if p != RUNNER for c in direct_calls(p)] == []


def test_the_check_sees_a_direct_call(tmp_path: Path) -> None:
    """It fails on both forms it reads: the argv in the call, and the argv built before it."""
    (tmp_path / "m.py").write_text("import subprocess\nsubprocess.run(['sacct', '-j', '1'])\n"
                                   "def f(name):\n    cmd = ['sinfo', '-p', name]\n    return subprocess.run(cmd)\n"
                                   "def g():\n    return subprocess.run(['git', 'status'])\n")
    assert direct_calls(tmp_path / "m.py") == ["m.py:2", "m.py:5"]
