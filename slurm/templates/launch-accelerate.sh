# One node, the way accelerate users launch: `accelerate launch` reads the accelerate config written from
# this job's config (its FSDP settings, precision and processes) and starts @{procs} process(es) here
accelerate launch --config_file @{accelerate_yaml} --num_processes=@{procs} --num_machines=1 --main_process_port=0 \
    @{program}
