# One process: no launcher to coordinate anything. workshop.training.train (and the bandwidth self-test, with
# --one-process) gives itself the environment torchrun would (RANK=0, WORLD_SIZE=1, a free port), without
# torchrun's own interpreter (~2 s of CPU per job)
python @{program}
