"""Communication: what each rank sends per step (`model`), what crosses the network between nodes
(`traffic`), set beside what a run recorded (`compare`, `timeline`, `plots`), and the network's own
all-reduce self-test (`bandwidth`). The recording itself is training's (`comm_recorder`, `comm_trace`):
the training script, the lowest layer, runs it. May import training, slurm and results.
"""
