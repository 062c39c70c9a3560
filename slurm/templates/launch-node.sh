# One node: torchrun starts @{procs} process(es) here and finds a free port itself
torchrun --standalone --nnodes=1 --nproc-per-node=@{procs} \
    @{program}
