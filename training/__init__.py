"""A config into a trained run directory: data, the one training loop, its steps, run directories.

corpus.py      Corpus (the type every loader returns), char_codec, CORPORA, data_provenance
data.py        corpora to token arrays (TinyShakespeare, BPE text, prepared directories)
batches.py     seeded samplers and the fixed validation batches
reference_levels.py  the unigram and bigram levels every result is read against
synthetic.py   the synthetic Markov-chain corpus with closed-form levels
presets.py     TrainConfig, the named presets (plain data), --set parsing, RunSpec
               (resolve, with_overrides, fit_vocab)
rundir.py      RunDir: the run-directory layout, its safety (lock and holder line, config and
               data checks, a finished run checked against its checkpoint) and reading it back
run_config.py  config_record (what config.json holds), config_diff (same run?), variant_name
               and slug (the directory name rule)
checkstate.py  every training-state field of a checkpoint checked before a resume uses it
checks/rundir_files.py  config.json, final.json, metrics and probe records, file kinds
checks/corpus_files.py  a prepared BPE directory's meta.json and token ids
budget.py      check_runnable: the memory estimate that refuses a size that cannot fit
sae_training.py  SAELens's training runner on an export: the corpus as its dataset (sae_dataset), a
               runner config that feeds no untrained id and records the export's processing
trainer.py     Trainer: one run directory set up (model, optimizer, sampler, validation batches),
               resumed or started, saved, its final record; handed a corpus loaded once before it
               (without one it loads its own: a notebook's convenience); train_runs: runs checked,
               locked, resumed and advanced (solo, or stacked by the step they stand at); mean_loss
loop.py        the one training loop for K members, a solo run K = 1: advance() is the cadence (evaluate,
               step, log, checkpoint, final record) written once; Step, what it asks of a step;
               not_finite, the one non-finite-number message; TrainingError, TrainingInterrupted
steps.py       the two steps side by side: SoloStep (one Trainer's model and AdamW, DDP, gradient
               accumulation: the bits of every solo run) and StackedStep (K members through StackedGPT
               and StackedAdamW, unstacked into each member before anything reads it)
optimizer.py   make_optimizer (AdamW, decay on matrices only), lr_at (warm-up + cosine, or constant)
flops.py       FLOPs per token and the measured matmul peak (MFU)
compile.py     maybe_compile (opt-in torch.compile)
numerics.py    dtype auto (bf16 autocast on CUDA, fp32 elsewhere), TF32, determinism: set for a run,
               recorded in final.json, restored after it
stacked.py     StackedGPT: K same-shape ResidualGPTs with weights on a member axis (batched
               matmuls; per-member residual gates and self_bias masks); StackedAdamW
grouping.py    group(): which runs share an ensemble (why_alone, size_for on a CPU cache,
               check_ensemble_fits for memory)
ensemble.py    EnsembleTrainer: member Trainers advanced by one stacked step, each writing its own
               run directory in the solo format; train_groups: group, then run - the one way from runs
               to trained run directories for python -m training, the local launcher and a cluster job
estimate.py    estimate_seconds: each shape's step, evaluation, probes, checkpoint timed on copies
__main__.py    python -m training
"""

from interp.command.entry import refuse_library_module
from interp.command.signals import guard_startup

guard_startup()  # a Ctrl-C while modules import: one line, not a traceback
refuse_library_module(__file__)  # python -m <a module that does not run>: one line, exit 2
