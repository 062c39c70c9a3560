"""The shared Hugging Face cache that jobs read offline: where the course keeps SQuAD in it, and the
offline load a job makes from it (run by `workshop prefetch`'s proof and by the preflight job).

Compute nodes have no internet, and students share one cache they cannot write. `datasets.load_dataset`
cannot read such a cache: even offline, with the dataset prepared, it takes lock files beside the data
(`<builder>.lock`, `_tmp_..._builder.lock`), and a read-only folder refuses them ("[Errno 30] Read-only
file system" or "Permission denied"). So the course keeps SQuAD v1.1 as a saved `DatasetDict` under
`$HF_HOME/workshop/squad-v1.1` (written once by `workshop prefetch` on a login node) and jobs open it with
`datasets.load_from_disk`, which only reads and memory-maps its Arrow files. The model and its tokenizer
stay in the Hub cache (`$HF_HOME/hub`), which transformers reads offline without writing.

    python -m workshop.training.hf_cache --model bloom-560m --dataset squad --train-size 2000 --eval-size 200

prints one JSON object: what loaded (or the error, with the file it concerns) and whether the cache could
be written, so a caller can tell that a proof ran on a read-only cache.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from workshop.training.data import hf_home, load_examples, squad_dir


def save_squad(splits: dict[str, Any], home: Path) -> Path:
    """Save `{"train": Dataset, "validation": Dataset}` as the course's copy; returns its folder.
    Written beside and then moved in place, so a reader never sees half a copy."""
    from datasets import DatasetDict, disable_progress_bars

    disable_progress_bars()      # one table for the admin, not a bar per split
    dest = squad_dir(home)
    tmp = dest.with_name(dest.name + ".partial")
    DatasetDict(splits).save_to_disk(str(tmp))
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def _writable(folder: Path) -> bool:
    """Whether a file can be created in `folder` (tried for real: root ignores permission bits)."""
    probe = folder / f".workshop-write-test-{os.getpid()}"
    try:
        probe.write_text("x")
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return False
        raise
    probe.unlink()
    return True


def offline_load(model: str, dataset: str, train_size: int, eval_size: int, eval_split: str = "dev",
                 seed: int = 0) -> dict[str, Any]:
    """What a job loads before it trains, the job's own way (tokenizer, model, both splits); the report of it.

    Raises nothing: a failure is reported with its error, and with the file it names where it names one
    (a lock file of `datasets`, a missing model file)."""
    home = hf_home()
    report: dict[str, Any] = {"hf_home": str(home), "model": model, "dataset": dataset,
                              "hub_offline": os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"),
                              "datasets_offline": os.environ.get("HF_DATASETS_OFFLINE", "") not in ("", "0"),
                              "cache_writable": _writable(home) if home.is_dir() else None}
    t0 = time.perf_counter()
    try:
        from workshop.training import models

        tok = models.load_tokenizer(model)
        net = models.build_model(model, tok, seed)
        report["model_ok"] = {"source": models.resolve_profile(model).source, "params": models.count_parameters(net),
                              "tokenizer_tokens": len(tok)}
        del net
    except Exception as e:      # noqa: BLE001 -- reported, not raised: the caller prints the fix
        report["model_error"] = f"{type(e).__name__}: {e}"[:600]
    try:
        report["dataset_ok"] = {"train": len(load_examples(dataset, "train", train_size)),
                                eval_split: len(load_examples(dataset, eval_split, eval_size)),
                                "from": str(squad_dir(home)) if dataset == "squad" else dataset}
    except Exception as e:      # noqa: BLE001
        report["dataset_error"] = f"{type(e).__name__}: {e}"[:600]
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workshop.training.hf_cache", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--train-size", type=int, required=True)
    ap.add_argument("--eval-size", type=int, required=True)
    ap.add_argument("--eval-split", default="dev")
    args = ap.parse_args(argv)
    report = offline_load(args.model, args.dataset, args.train_size, args.eval_size, args.eval_split)
    print(json.dumps(report), flush=True)
    return 0 if "model_error" not in report and "dataset_error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
