"""Where runs train: locally or as Slurm jobs (the launcher, the job record, submission, waiting, watching).

launch.py      local, ensembles, submitit
job_record.py  which Slurm job trains which run (.submitit/jobs.json): no run submitted twice
slurm_jobs.py  what Slurm says of a sweep's jobs: sbatch refusals, queued jobs, --collect's account
wait_jobs.py   waiting on submitted jobs: one progress line, a job that leaves the queue without
               a result reported within a poll or two, the finished ones aggregated (exit 3)
slurm_watch.py what Slurm says of a job (squeue, then sacct, then scontrol; slurmstepd's last line)
"""
