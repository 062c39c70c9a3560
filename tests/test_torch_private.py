"""Private PyTorch names live in workshop/training/torch_private.py and nowhere else in workshop/, each
one resolves on this torch, and a missing one makes the feature say "not measured on this torch" while
the rest runs (issue #36, item 1)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

from workshop.training import torch_private

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "workshop" / "training" / "torch_private.py"

# The private names the course reads, listed here by hand (not from the module under test): a name
# added to the code must be added to torch_private.NAMES and here.
EXPECTED = {
    "MemTracker", "FSDPMemTracker", "TorchDispatchMode", "_UpdateType", "_FSDPRefType", "_curr_mem_snap", "_update_snap",
    "_update_peak_stats", "_track_optimizer_states", "tree_map_only", "tree_iter", "_get_fsdp_state",
    "_fsdp_param_group", "_pre_forward_hook_handle", "_post_forward_hook_handle", "HOOK_DICTS",
    "CheckpointWrapper", "_checkpoint_wrapped_module", "kineto_results", "_dump_fr_trace_json",
    "_get_all_pg_configs", "_record_memory_history", "_dump_snapshot",
    "FakeTensorMode", "FakeTensor", "FakeStore",
}
# attributes that exist only on an object at run time (their features' tests exercise them:
# test_memory, test_comm, test_sharding_read_back)
ON_INSTANCES = {"_curr_mem_snap", "_fsdp_param_group", "_pre_forward_hook_handle", "_post_forward_hook_handle",
                "HOOK_DICTS", "kineto_results", "_checkpoint_wrapped_module"}
# private names of other libraries (not torch's), where they are read: a new one fails the scan too
NOT_TORCH = {("workshop/training/fsdp_cpu.py", "_shared_state"),          # accelerate's state singletons
             ("workshop/training/fsdp_cpu.py", "_validate_accelerator"),  # accelerate's ParallelismConfig
             ("workshop/training/train.py", "_exit"),                     # os._exit
             ("workshop/slurm/watch.py", "_repr_mimebundle_")}            # IPython's display protocol
# the Trainer's own step pieces the dry run drives (transformers, accelerate): torch_private.TRAINER_NAMES
TRAINER_EXPECTED = {"_reset_state", "_prepare_for_training", "_set_sync_gradients", "_clip_grad_norm"}
PRIVATE_MODULE_PARTS = ("_tools", "_C", "_pytree", "_checkpoint", "_fully_shard", "_dynamo", "_inductor")


def private_names() -> set[str]:
    return {*torch_private.NAMES, *torch_private.HOOK_DICTS}


def test_the_list_is_the_one_written_here_and_says_why_and_where():
    assert set(torch_private.NAMES) == EXPECTED
    for name, entry in torch_private.NAMES.items():
        assert entry.path.startswith("torch") and ":" in entry.path, name
        assert len(entry.purpose) > 20, name
        assert "2.13.0" in entry.checked_on, name


def test_the_trainers_private_names_are_listed_with_torchs_and_resolve():
    """transformers' and accelerate's private names the dry run calls: listed in torch_private beside torch's,
    each found where its entry says (a class attribute), on the versions it names."""
    assert set(torch_private.TRAINER_NAMES) == TRAINER_EXPECTED
    for name, entry in torch_private.TRAINER_NAMES.items():
        module, _, attrs = entry.path.partition(":")
        obj = importlib.import_module(module)
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
        assert callable(obj) and attrs.endswith(name) and len(entry.purpose) > 20, name


@pytest.mark.parametrize("name", sorted(EXPECTED - ON_INSTANCES))
def test_each_name_resolves_on_this_torch(name):
    module, _, attrs = torch_private.NAMES[name].path.partition(":")
    obj = importlib.import_module(module)
    for part in attrs.split("."):
        obj = getattr(obj, part)
    assert obj is not None


def _violations(path: Path, rel: str, tree: ast.AST, defined: set[str]) -> list[str]:
    found = []
    listed = private_names()
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names
                      if a.name.startswith("torch") and any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch"):
            if any(p.startswith("_") for p in node.module.split(".")):
                found.append(f"{where} from {node.module}")
            found += [f"{where} from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") or a.name in listed]
        elif isinstance(node, ast.Attribute):
            name = node.attr
            if isinstance(node.value, ast.Name) and node.value.id == "torch_private":
                continue  # the module's own accessors
            if name in listed:
                found.append(f"{where} .{name}")
            elif name.startswith("_") and not name.startswith("__") and name not in defined \
                    and (rel, name) not in NOT_TORCH:
                found.append(f"{where} .{name} (a private name no workshop module defines)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if value in listed or any(f"{part}." in value or f".{part}" in value for part in PRIVATE_MODULE_PARTS
                                      if value.startswith("torch.")):
                found.append(f"{where} string {value!r}")
    return found


def test_no_private_torch_name_outside_its_module():
    files = sorted((ROOT / "workshop").rglob("*.py"))
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    defined: set[str] = set()   # names workshop itself defines (its own underscored helpers)
    for path, tree in trees.items():
        if path == HOME:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                defined.add(node.attr)
            elif isinstance(node, ast.alias):
                defined.add((node.asname or node.name).split(".")[0])
    defined -= private_names()
    found = [v for path, tree in trees.items() if path != HOME
             for v in _violations(path, str(path.relative_to(ROOT)), tree, defined)]
    assert not found, "private torch names outside workshop/training/torch_private.py:\n" + "\n".join(found)


def test_the_scan_catches_a_private_name(tmp_path):
    """The scan itself finds what it must (so that the test above cannot pass by reading nothing)."""
    source = ("from torch.distributed._tools.mem_tracker import MemTracker\n"
              "import torch._dynamo\n"
              "x = tracker._curr_mem_snap\n"
              "y = getattr(m, '_checkpoint_wrapped_module')\n"
              "z = torch.cuda.memory._snapshot()\n")
    found = _violations(tmp_path / "x.py", "x.py", ast.parse(source), set())
    assert {f.split()[0] for f in found} == {f"x.py:{n}" for n in range(1, 6)}, found


def test_a_missing_tracker_internal_leaves_the_step_untracked_and_says_so(monkeypatch):
    """A torch without MemTracker._update_peak_stats (simulated by removing it; no other torch is
    installed here): the tracked step runs untracked, `reason` names the missing name, training goes on."""
    from types import SimpleNamespace

    from torch.distributed._tools.mem_tracker import MemTracker

    from workshop.training.tensor_memory import TensorMemoryCallback

    monkeypatch.delattr(MemTracker, "_update_peak_stats")
    monkeypatch.setattr(torch_private, "_NOT_MEASURED", [])
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters())
    callback = TensorMemoryCallback(torch.device("cpu"), offload=False)
    state = SimpleNamespace(global_step=0, max_steps=4)
    callback.on_train_begin(None, state, None)
    for step in range(4):
        state.global_step = step
        callback.on_step_begin(None, state, None, optimizer=optimizer, model=model)
        model(torch.randn(2, 8)).sum().backward()
        optimizer.step()
        callback.on_step_end(None, state, None)
    assert callback.measured is None
    assert callback.reason.startswith(f"not measured on this torch ({torch.__version__}): tensor memory")
    assert "MemTracker._update_peak_stats is missing" in callback.reason
    assert torch_private.not_measured_lines() == [callback.reason]
    assert len(callback.untracked_steps_s) == 4   # every step ran, none under a tracker


def test_a_missing_flight_recorder_dump_gives_no_entries_and_a_line(monkeypatch):
    from workshop.training import comm_recorder

    monkeypatch.setenv(comm_recorder.FLIGHT_RECORDER_ENV, "16")
    monkeypatch.setattr(torch_private, "_NOT_MEASURED", [])
    monkeypatch.delattr(torch._C._distributed_c10d, "_dump_fr_trace_json")
    assert comm_recorder.flight_entries() is None
    [line] = torch_private.not_measured_lines()
    assert "torch._C._distributed_c10d:_dump_fr_trace_json is missing" in line


def test_the_memory_snapshot_records_python_stacks_only() -> None:
    # issue 49: torch's default (stacks="all") records C++ frames too; symbolising them when the snapshot is
    # dumped can take minutes on one rank while the others wait on a 300 s collective timeout
    import inspect

    start = torch_private.memory_history_options("all", 100_000)
    assert start["stacks"] == "python" and start["enabled"] == "all"
    signature = inspect.signature(torch.cuda.memory._record_memory_history)
    signature.bind(**start)                                             # this torch takes those arguments
    signature.bind(**torch_private.memory_history_options(None, 100_000))
    assert signature.parameters["stacks"].default == "all"              # ... and would record C++ without them
