"""What a set of runs costs before any trains: training FLOPs (training.flops) and the time measured here (each
shape's steps, evaluations, probes and checkpoints timed now, training.estimate), for the experiments' prefaces.

The measured time is the training's: what an experiment does before it (start-up, the corpus, the reference
levels) and after it (its analysis, its report) is not in it, and a machine whose cores other jobs share trains
slower than it timed (torch's threads wait for each other: 20-70x slower stretches were seen on 2 shared cores).
time_here says both, so a printed time reads as the floor it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from experiments.shared.plan import Context, Job

ASSUMED_FLOPS = 200e9  # the FLOP/s the printed time estimate assumes where nothing is timed here


def run_flops(model_cfg, train_cfg) -> float:
    """Training FLOPs of one run (training.flops: 6N + attention per token) plus its evaluations' forwards."""
    from training.budget import n_params
    from training.flops import flops_per_token

    per_token = flops_per_token(model_cfg, n_params(model_cfg))
    tokens = train_cfg.batch_size * train_cfg.grad_accum * model_cfg.n_ctx
    eval_tokens = train_cfg.batch_size * model_cfg.n_ctx * train_cfg.eval_batches * len(train_cfg.eval_steps())
    return per_token * tokens * train_cfg.max_steps + per_token / 3 * eval_tokens


def estimate(ctx: Context, jobs: list[Job]) -> dict[str, float]:
    """Training FLOPs of the runs (training.flops), those still to train, and the seconds at ASSUMED_FLOPS."""
    todo = grid_cost([job for job in jobs if not job.run_dir(ctx.out).finished])
    return {
        "flops": grid_cost(jobs)["flops"],
        "flops_to_train": todo["flops"],
        "seconds_at_200_gflops": todo["seconds_at_200_gflops"],
    }


def grid_cost(jobs: list[Job]) -> dict[str, float]:
    """What the runs cost in all, finished or not (the preface's estimate counts only what is left)."""
    total = sum(run_flops(job.spec.model, job.spec.train) for job in jobs)
    return {"flops": total, "seconds_at_200_gflops": total / ASSUMED_FLOPS}


def flops_text(flops: float) -> str:
    return f"{flops / 1e12:.1f} TFLOP" if flops >= 1e11 else f"{flops / 1e9:.1f} GFLOP"


def cost_line(ctx: Context, jobs: list[Job], timed: bool = False) -> tuple[str, dict[str, float]]:
    """The prefaces' 'estimated cost' line (all the runs' training, what of it is left) and the estimate behind it;
    timed: then ': ' and time_here's text, where runs are left to train on this machine (--launcher local)."""
    e = estimate(ctx, jobs)
    runs = f"{len(jobs)} run{'s' * (len(jobs) != 1)}"
    left = flops_text(e["flops_to_train"])
    line = f"estimated cost: {flops_text(e['flops'])} of training for {runs}, {left} still to train"
    if timed and ctx.args.launcher == "local" and e["flops_to_train"]:
        line += f": {time_here(ctx, jobs)}"
    return line, e


def measured_minutes(ctx: Context, jobs: list[Job]) -> float:
    """Minutes training the unfinished runs takes here: steps, evaluations, the probes at them, checkpoints
    (training.estimate, each shape timed now); not the experiment's start-up, analysis or report."""
    from experiments.cluster.launch import DEFAULT_ENSEMBLE_SIZE, make_trainer
    from training.estimate import estimate_seconds

    todo = [make_trainer(job, ctx.out, ctx.corpus) for job in jobs if not job.run_dir(ctx.out).finished]
    return estimate_seconds(todo, getattr(ctx.args, "ensemble_size", DEFAULT_ENSEMBLE_SIZE)) / 60


def duration_text(seconds: float) -> str:
    """'about 40 s', 'about 2.5 min', 'about 1.3 h': a short time is not written as '0.0 min'."""
    if seconds < 90:
        return f"about {max(seconds, 1):.0f} s"
    return f"about {seconds / 60:.1f} min" if seconds < 5400 else f"about {seconds / 3600:.1f} h"


def time_here(ctx: Context, jobs: list[Job]) -> str:
    """The measured training time as a preface prints it, said as the floor it is."""
    return (
        f"{duration_text(60 * measured_minutes(ctx, jobs))} of training here (steps, evaluations, probes and "
        "checkpoints timed now; a floor: start-up, the analysis and the report come on top, and other jobs on "
        "these cores slow it)"
    )
