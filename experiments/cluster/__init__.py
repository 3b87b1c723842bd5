"""Where runs train: locally or as Slurm jobs (the launcher, the job record, submission, waiting, watching)."""
