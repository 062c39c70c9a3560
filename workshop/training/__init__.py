"""Training: one run, from a config to the files it leaves.

Everything a job runs on its nodes: the config (`config`, `errors`, `hf_fsdp`), data and model (`data`, `tokenizer`,
`models`), FSDP as the student writes it (`sharding`, `wrap_function`, `fsdp_cpu`), the Trainer and its
callbacks (`trainer`, `metrics`, `tensor_memory`, `batch_probe`, `evaluation`, `squad_metrics`), what a run
leaves (`run_record`; `checkpoints`: checkpoints and the digest that seals the numbers), the Trainer's step
arithmetic (`counted_steps`), and the entry point `train`
(`python -m workshop.training.train`, `workshop train`).

May import: nothing else of `workshop`. A training process on a node loads this layer and no other.
"""
