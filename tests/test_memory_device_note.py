"""A measured figure beside a prediction for another device says why (issue 54, point 5): notebook 02 on the
test cluster (a course site with GPUs, its jobs on CPU ranks) measured full_shard's params at 2.03 MB beside the
student's correct prediction and the model's 2.46 MB, with nothing saying why: a GPU holds the next block
gathered too (FSDP2's prefetch), a CPU rank one block at a time."""

from __future__ import annotations

from workshop.results.logs import ParsedLog
from workshop.results.memory_compare import device_notes

CONFIG = {"model": "tiny", "sharding": "full_shard", "nodes": 1, "procs_per_node": 1, "batch_size": 2,
          "max_length": 256, "precision": "fp32", "loss": "answer_only", "output_dir": "/x/run"}


def run(config_device: str, ran_on: str) -> ParsedLog:
    return ParsedLog(run_args={"config": {**CONFIG, "device": config_device}}, summary={"device": ran_on})


def test_a_cpu_run_of_a_gpu_site_says_why_its_params_sit_below_the_prediction() -> None:
    note, = device_notes([run("auto", "cpu")], ["full_shard"])
    assert note.startswith("full_shard: ran on CPU ranks, while the site's predictions (yours, the model's) are for "
                           "its GPUs: params 2.03 MB on a CPU rank (what it measured), 2.46 MB on a GPU")
    assert device_notes([run("cpu", "cpu"), run("auto", "cuda")], ["a", "b"]) == []      # same device: nothing to say
    assert device_notes([ParsedLog(run_args={"config": {**CONFIG, "sharding": "none", "device": "auto"}},
                                   summary={"device": "cpu"})], ["baseline"]) == []   # nothing gathered
