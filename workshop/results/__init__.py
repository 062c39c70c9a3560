"""Results: what training runs leave, read back.

Logs into records, records into the course's tables and plots (`logs`, `tables`, `plots`); a failed job
into a sentence (`diagnose`); the memory model each run is set beside (`memory`, `memory_compare`); a
submitted job checked against Slurm's accounting and its own seal (`verify`); a cluster measured
(`bandwidth`, `bench`).

May import: `workshop.training` (what a run writes) and `workshop.slurm` (job records, site profiles).
Never the course.
"""
