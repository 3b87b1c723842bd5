"""The files a run directory and a prepared corpus hold, checked before anything uses them (see interp.files.checks,
whose helpers these use): training.checks.rundir_files (config.json, final.json, the files' kinds) and
training.checks.corpus_files (a prepared BPE directory's meta.json, train.bin and val.bin)."""
