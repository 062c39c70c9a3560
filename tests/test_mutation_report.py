"""benchmarks/mutation.py's reading of mutmut's mutants: which survivors change only a `--help` text (equivalent
mutants, out of the score) and which change what a command does (they count against it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import mutation  # noqa: E402

MUTATED = '''
import argparse

def x_main__mutmut_orig(argv=None):
    p = argparse.ArgumentParser(prog="workshop x", description="Do x.")
    p.add_argument("--n", type=int, default=1, help="how many")
    return p.parse_args(argv).n

def x_main__mutmut_1(argv=None):
    p = argparse.ArgumentParser(prog="workshop x", description="Do x.")
    p.add_argument("--n", type=int, default=1, help="XXhow manyXX")
    return p.parse_args(argv).n

def x_main__mutmut_2(argv=None):
    p = argparse.ArgumentParser(prog="workshop x", description=None)
    p.add_argument("--n", type=int, default=1, )
    return p.parse_args(argv).n

def x_main__mutmut_3(argv=None):
    p = argparse.ArgumentParser(prog="workshop x", description="Do x.")
    p.add_argument("--n", type=int, default=2, help="how many")
    return p.parse_args(argv).n

def x_main__mutmut_4(argv=None):
    p = argparse.ArgumentParser(prog=None, description="Do x.")
    p.add_argument("--n", type=int, default=1, help="how many")
    return p.parse_args(argv).n

def x_one__mutmut_orig(argv=None):
    return argparse.ArgumentParser(prog="workshop y", description="Do y.").parse_args(argv)

def x_one__mutmut_1(argv=None):
    return argparse.ArgumentParser(prog="workshop y", ).parse_args(argv)

def x_plain__mutmut_orig(n):
    return n + 1

def x_plain__mutmut_1(n):
    return n + 1
'''


def test_only_a_changed_or_removed_help_text_is_an_equivalent_mutant(tmp_path: Path) -> None:
    """A help or description text changed or dropped is equivalent; a default or the prog a usage error names
    is not; nor is a mutant whose module or original mutmut did not write."""
    module = tmp_path / "mutants" / "pkg" / "mod.py"
    module.parent.mkdir(parents=True)
    module.write_text(MUTATED)
    found = {n: mutation.help_text_only(f"pkg.mod.x_main__mutmut_{n}", tmp_path) for n in (1, 2, 3, 4, 5)}
    assert found == {1: True, 2: True, 3: False, 4: False, 5: False}
    assert not mutation.help_text_only("pkg.other.x_main__mutmut_1", tmp_path)
    # the only help text removed is still help text; a function without any holds none to change
    assert mutation.help_text_only("pkg.mod.x_one__mutmut_1", tmp_path)
    assert not mutation.help_text_only("pkg.mod.x_plain__mutmut_1", tmp_path)


def test_a_sample_without_generated_mutants_says_how_to_make_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`--sample` draws from mutants/ as mutmut left it: with none there it would test every mutant for an hour,
    so it stops at once and says what to run first."""
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    monkeypatch.setattr(mutation, "run", lambda *a, **k: pytest.fail("mutmut was started"))
    assert mutation.main(["--sample", "60"]) == 2
    assert "run `.venv/bin/mutmut run` first" in capsys.readouterr().err
