"""Communication: what each rank sends per step (`model`), set beside what a run recorded (`compare`,
`timeline`, `plots`), and the network's own all-reduce self-test (`bandwidth`). Notebook 05's plain traffic
rule, the reference its hidden test compares against, is the grader's (`workshop.grading.traffic`). The recording itself is training's (`comm_recorder`, `comm_trace`):
the training script, the lowest layer, runs it. May import training, slurm and results.
"""
