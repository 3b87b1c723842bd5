"""Benchmarks: commands that measure speed, never timed tests (`python -m benchmarks.step`).

step.py        python -m benchmarks.step: the training step beside a bare nanoGPT-style step
shapes.py      a preset's model and training config, how long to time it, and its batches
variants.py    StepVariant: one way of taking a training step
timing.py      the variants' steps in alternating rounds, the trainer's other work, Trainer.run()
children.py    child processes: peak resident memory, one measurement per process
report.py      the benchmark's console report (--json prints the same dict)
reference.py   the nanoGPT-style GPT the step is measured against
tl_exactness.py  the export / bridge against ResidualGPT, per hook
ensemble_speed.py  python -m benchmarks.ensemble_speed: K solo steps against one stacked step, side by side
gpu_check.py   python -m benchmarks.gpu_check (make gpu-check): pytest -m cuda, the CUDA step benchmark,
               Table 1 as ensembles, the routing test at paper-10m, one table and one folder; --dry-run on a CPU
gpu_step.py    the step on CUDA side by side with the reference (eager, compiled, deterministic on/off)
gpu_rows.py    gpu_check's table rows and targets
"""

from interp.command.entry import refuse_library_module

refuse_library_module(__file__)  # python -m <a module that does not run>: one line, exit 2
