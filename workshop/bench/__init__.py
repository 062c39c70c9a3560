"""The bench: every course configuration as a real run on one device, measured (`harness`, `workshop bench`),
beside a plain PyTorch loop (`plain_loop`); the GPU check's report (`gpu_report`) and the line a CPU table
shows of what a GPU did (`gpu_reference`). A layer above results and comm.
"""
