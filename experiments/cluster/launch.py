"""Where an experiment's runs train: here, one after another, or as cluster jobs through submitit.

    --launcher local        (default) train every unfinished run in this process
    --launcher slurm        submit every unfinished run as one Slurm job (submitit), wait with one
                            progress line (jobs done, running, pending and why), then aggregate as the
                            local launcher does
    --launcher slurm-local  the same submission path through submitit's local executor (real
                            subprocesses on this machine): for trying a sweep without a cluster

A job trains exactly what the local launcher would: it re-plans the experiment from the same
command line and trains its one (preset, variant, seed) run directory, so the results are the
same bit for bit and a rerun submits only what is still unfinished. With --gpus-per-run > 1 a
job runs its run under torchrun (DDP), as `python -m training` does on one machine.

A job that dies (cancelled, killed, out of memory, its node lost, past its time limit) is said within
two polls of leaving the queue: its run, what Slurm said (squeue, then sacct, else scontrol:
experiments.cluster.slurm_watch, so it works with accounting off) and its log. The other jobs are
waited for, the finished runs are aggregated (the results file names the missing ones under
"incomplete"), and the command exits 3 with the command that resumes the rest from their checkpoints.
Ctrl-C while waiting ends the waiting only: the jobs go on, named with the scancel that stops them. Each
submission records which job trains which run (experiments.cluster.job_record), so a rerun, or a second
command at the same time, waits for jobs still queued instead of submitting their runs twice; --collect
says of each missing run whether its job still runs or left the queue without a result. A submission is
recorded before sbatch runs, under a job name of its own: the jobs an interrupt inside sbatch leaves unrecorded
are found by that name on the next run, recorded and waited for (slurm_jobs.found_after_interrupt). A submission
sbatch refuses is one error line naming the option. Tested against a real one-node Slurm:
tests/test_slurm.py (`make test-slurm`); docs/experiments.md says all of it for the user.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import secrets
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from experiments.cluster.job_record import JobRecord, run_key
from experiments.cluster.slurm_jobs import (
    found_after_interrupt,
    interrupted_line,
    queued_earlier,
    refused_line,
    submission_entry,
    unfinished_refusal,
)
from experiments.cluster.wait_jobs import wait
from experiments.shared.options import check_number
from experiments.shared.plan import Context, Job
from interp.command.signals import fired_code
from interp.errors import ToolkitError

LAUNCHERS = ("local", "slurm", "slurm-local")
# The launcher group's text in --help (the outcomes a user meets: docs/experiments.md says them at length).
LAUNCH_HELP = (
    "exit status: 0 every run finished; 2 a refusal (one error: line; sbatch refusing the submission too); "
    "3 incomplete: some jobs ended without finishing their runs (said as they leave the queue), the finished "
    "runs are aggregated, the results file lists the rest under 'incomplete', and the error line gives the "
    "command that resumes them; 130/143 interrupted. Ctrl-C while waiting leaves the Slurm jobs running, "
    "not cancelled: it names them and the scancel that stops them, and the same command waits for them "
    "again (a rerun never submits a run whose job is still queued). Tested on a real one-node Slurm: "
    "make test-slurm (scripts/slurm-cluster.sh)."
)
DEFAULT_ENSEMBLE_SIZE = 16


def add_launcher_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "launching (see experiments.cluster.launch; docs/experiments.md, Sweeps on a Slurm cluster)",
        textwrap.fill(LAUNCH_HELP, 96),
    )
    g.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="local (default): train here; slurm: one submitit job per unfinished run; "
        "slurm-local: the same through submitit's local executor",
    )
    g.add_argument("--slurm-partition", help="Slurm partition")
    g.add_argument("--slurm-time", type=int, default=None, help="minutes per job (default 60)")
    g.add_argument(
        "--gpus-per-run", type=int, default=None, help="GPUs per job (default 0); > 1 runs the job under torchrun"
    )
    g.add_argument(
        "--slurm-array-parallelism",
        type=int,
        default=None,
        help="at most this many jobs of the array at once (default 32)",
    )
    g.add_argument(
        "--slurm-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other submitit parameter, e.g. slurm_mem_gb=32 or slurm_account=lab (repeatable)",
    )
    g.add_argument(
        "--no-wait",
        action="store_true",
        help="submit and exit: print the job ids and the --collect command that aggregates once they are done",
    )
    g.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: aggregate finished runs. An unfinished one is said with its Slurm job's state: "
        "queued or running (exit 2: wait), or gone without a result (with the command that resumes it; when "
        "every missing run's job is gone, the finished runs are aggregated and the exit status is 3)",
    )
    g.add_argument(
        "--ensemble-size",
        type=int,
        default=None,
        metavar="K",
        help="local launcher: train up to K runs of one shape as one ensemble (training.ensemble; "
        f"default {DEFAULT_ENSEMBLE_SIZE}); 1 trains every run alone",
    )


# Options only a Slurm launcher reads: refused under the local one (which would ignore them), and left out of
# the command line a cluster job re-plans from (it runs under the local launcher's rules).
SLURM_ONLY = (
    "--no-wait",
    "--slurm-set",
    "--slurm-partition",
    "--slurm-time",
    "--gpus-per-run",
    "--slurm-array-parallelism",
)
_SLURM_DEFAULTS = {"slurm_time": 60, "gpus_per_run": 0, "slurm_array_parallelism": 32}


def check_launcher_arguments(args: argparse.Namespace) -> None:
    """Check the launcher's options, then fill in the defaults of those given as None (so 'given' is knowable)."""
    if args.launcher == "local" and (args.no_wait or args.slurm_set or args.slurm_partition is not None):
        raise ToolkitError("--no-wait, --slurm-set and --slurm-partition need --launcher slurm (or slurm-local)")
    given = [f"--{k.replace('_', '-')}" for k in _SLURM_DEFAULTS if getattr(args, k) is not None]
    if args.launcher == "local" and given:
        raise ToolkitError(
            f"{', '.join(given)}: only --launcher slurm (or slurm-local) reads it; the local one would not"
        )
    if args.launcher != "local" and args.ensemble_size is not None:
        raise ToolkitError("--ensemble-size is the local launcher's: a Slurm job trains one run")
    for key, default in {**_SLURM_DEFAULTS, "ensemble_size": DEFAULT_ENSEMBLE_SIZE}.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    for key, minimum in (("slurm_time", 1), ("gpus_per_run", 0), ("slurm_array_parallelism", 1), ("ensemble_size", 1)):
        check_number(f"--{key.replace('_', '-')}", getattr(args, key), minimum)
    slurm_parameters(args)  # KEY=VALUE syntax


def slurm_parameters(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"timeout_min": args.slurm_time, "slurm_array_parallelism": args.slurm_array_parallelism}
    if args.slurm_partition:
        params["slurm_partition"] = args.slurm_partition
    if args.gpus_per_run:
        params["gpus_per_node"] = args.gpus_per_run
    for item in args.slurm_set:
        if "=" not in item:
            raise ToolkitError(f"--slurm-set expects KEY=VALUE, got {item!r}")
        key, text = (s.strip() for s in item.split("=", 1))
        try:
            params[key] = json.loads(text)
        except json.JSONDecodeError:
            params[key] = text
    return params


def launch(name: str, ctx: Context, jobs: list[Job], argv: list[str]) -> bool:
    """Make every run of experiment `name` finished; False when jobs were submitted and left running (--no-wait).

    Every run directory is checked first (RunDir.check, and RunDir.verify_finished for a finished
    one): one that holds another configuration, was trained on other data, or whose records disagree
    with its checkpoint is refused before anything trains or is submitted.
    """
    todo = []
    for job in jobs:
        run = job.run_dir(ctx.out)
        record = run_config(job, ctx.corpus)
        run.check(record)
        if run.finished:
            run.verify_finished(record)  # a finished run is reused only as a fact its checkpoint confirms
        else:
            todo.append(job)
    if ctx.args.collect:
        if todo:
            raise unfinished_refusal(ctx, todo)
        return True
    if ctx.args.launcher == "local":
        train_local(ctx, todo)
        return True
    return submit(name, ctx, todo, argv)


def run_meta(job: Job) -> dict[str, Any]:
    return {"preset": job.group.spec.preset, "variant": job.variant.name, "seed": job.seed}


def run_config(job: Job, corpus) -> dict[str, Any]:
    """What config.json holds for this job's run on this corpus (what RunDir.check compares)."""
    from training.run_config import config_record

    spec = job.spec.fit_vocab(corpus.vocab_size)
    return config_record(spec.model, spec.train, corpus, job.variant.model_init, run_meta(job))


def finished_records(ctx: Context, jobs: list[Job], skip_unfinished: bool = False) -> list[tuple[Job, dict[str, Any]]]:
    """Each job's run record (RunDir.load), checked as launch checks a run before reusing it, with its variant and
    seed: nothing unverified is read. An unfinished run is refused (verify_finished), or left out with
    skip_unfinished."""
    out = []
    for job in jobs:
        run, asked = job.run_dir(ctx.out), run_config(job, ctx.corpus)
        if skip_unfinished and not run.finished:
            continue
        run.check(asked)
        run.verify_finished(asked)
        out.append((job, {**run.load(), "variant": job.variant.name, "seed": job.seed}))
    return out


def make_trainer(job: Job, out: Path, corpus=None, progress: bool = False):
    """The Trainer of one run, with the default probes and the experiment's callbacks."""
    from probes import default_callbacks
    from training.trainer import Trainer

    spec = job.spec
    callbacks = default_callbacks(spec.train) if job.group.probes and spec.train.probes else []
    if job.group.callbacks is not None:
        callbacks += job.group.callbacks(job.variant, job.seed)
    return Trainer(
        spec.model,
        spec.train,
        job.run_dir(out),
        callbacks=callbacks,
        corpus=corpus,
        progress=progress,
        model_init=job.variant.model_init,
        meta=run_meta(job),
    )


def train_job(
    job: Job, out: Path, corpus=None, progress: bool = False, ensemble_size: int = DEFAULT_ENSEMBLE_SIZE
) -> dict[str, Any]:
    """Train (or resume) one run directory; a finished one is only checked. A run that cannot go on (a
    non-finite loss) is named in its error: in a grid of dozens the step alone does not say which.

    training.ensemble.train_groups decides as for the local launcher: a run of a shape that trains stacked
    here trains through the stacked step even alone, so a cluster job or a rerun of one run ends bitwise
    equal to the same run trained inside an ensemble by the local launcher."""
    from training.ensemble import train_groups

    return train_groups([make_trainer(job, out, corpus, progress)], ensemble_size, progress)[0]


def train_local(ctx: Context, todo: list[Job]) -> None:
    """Train every unfinished run here: same-shape runs as ensembles of up to --ensemble-size members
    (training.ensemble.train_groups)."""
    from training.ensemble import train_groups

    size = getattr(ctx.args, "ensemble_size", DEFAULT_ENSEMBLE_SIZE)
    trainers = [make_trainer(job, ctx.out, ctx.corpus, ctx.progress) for job in todo]
    train_groups(trainers, size, ctx.progress, runs_bar=ctx.progress)


# ----- submitit ----------------------------------------------------------------------------------------


def job_main(module: str, argv: list[str], preset: str, variant: str, seed: int, gpus: int = 0) -> str:
    """What a cluster job runs: re-plan the experiment from its command line, train one run."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm":
        ignore_time_limit_warning()
    if gpus > 1 and "RANK" not in os.environ:
        payload = json.dumps([module, argv, preset, variant, seed])
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}"]
        subprocess.run([*torchrun, "-m", "experiments.cluster.launch", payload], check=True)
        return preset
    import importlib

    experiment = importlib.import_module(f"experiments.{module}.run").EXPERIMENT
    ctx, jobs = experiment.context(argv)
    matches = [j for j in jobs if j.key == (preset, variant, seed)]
    if len(matches) != 1:
        raise ToolkitError(f"the plan of {module} has no run {preset}/{variant}/seed{seed}")
    train_job(matches[0], ctx.out, ctx.corpus, ensemble_size=getattr(ctx.args, "ensemble_size", DEFAULT_ENSEMBLE_SIZE))
    return str(matches[0].run_dir(ctx.out).path)


def ignore_time_limit_warning() -> None:
    """submitit's warning signal (USR2, sent up to a minute earlier than asked before the time limit) ends a
    job that cannot requeue itself at once, "timed-out": a job of a few minutes was ended near its start, on
    every rerun. Ignored, the job trains to its limit (its checkpoints are atomic) and ends TIMEOUT, which
    the launcher's watch reports."""
    import signal

    from submitit import JobEnvironment

    signal.signal(JobEnvironment._usr_sig(), signal.SIG_IGN)


def importable(name: str) -> bool:
    """Whether experiment `name` is the module experiments.<name>.run, which a cluster job imports to re-plan it
    (job_main); one declared elsewhere (a notebook, a test file) trains with the local launcher only."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"experiments.{name}.run") is not None
    except ImportError:  # no package experiments.<name>
        return False


def submit(name: str, ctx: Context, todo: list[Job], argv: list[str]) -> bool:
    if not importable(name):
        raise ToolkitError(
            f"--launcher {ctx.args.launcher}: a cluster job re-plans the experiment by importing "
            f"experiments.{name}.run, and experiment {name!r} is not there (declared in a notebook "
            "or a test file?); use --launcher local, or make it the package experiments/"
            f"{name}/ (docs/DESIGN.md, Adding an experiment)"
        )
    try:
        import submitit
    except ImportError:
        raise ToolkitError("--launcher slurm needs submitit: pip install 'residual-interp[cluster]'") from None
    if not todo:
        return True
    # Jobs re-plan from the command line: make --out absolute so they find the same directories.
    job_argv = job_command(argv, ctx.out.resolve())
    folder = ctx.result_dir.resolve() / ".submitit"
    cluster = "local" if ctx.args.launcher == "slurm-local" else "slurm"
    # A name no other submission has: the jobs of one that an interrupt inside sbatch leaves unrecorded are
    # found by it (squeue --name) on the next run (slurm_jobs.found_after_interrupt).
    job_name = f"{name}-{secrets.token_hex(3)}"
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
        executor.update_parameters(name=job_name, **slurm_parameters(ctx.args))
    except Exception as e:  # submitit raises plain exceptions for an unknown parameter or a missing sbatch
        raise ToolkitError(f"cannot set up the {cluster} executor: {e}") from None
    # What resumes the sweep (waiting for it): the record keeps it for --collect, which names it for a job that died.
    command = shlex.join([sys.executable, "-m", f"experiments.{name}", *without(argv, "--no-wait")])
    record = JobRecord(folder)
    slurm = cluster == "slurm"
    with record.held() if slurm else contextlib.nullcontext():
        found = found_after_interrupt(record, folder, job_main) if slurm else []
        queued = queued_earlier(record, todo, ctx.out, folder) if slurm else []
        todo = [job for job in todo if all(job is not j for j, _ in queued)]
        busy = [job for job in todo if job.run_dir(ctx.out).busy()]  # trained by another process right now
        todo = [job for job in todo if job not in busy]
        if slurm and todo:  # recorded before sbatch runs: an interrupt inside it leaves its jobs findable
            record.begin(submission_entry(job_name, name, command, job_argv, todo, ctx))
        try:
            submitted = sbatch(executor, ctx, todo, name, job_argv, job_name if slurm else None) if todo else []
        except ToolkitError:  # refused: nothing queued
            if slurm:
                record.end()
            raise
        if slurm and submitted:
            record.add(
                {run_key(j.run_dir(ctx.out).path, ctx.out): {"job": s.job_id, "command": command} for j, s in submitted}
            )
    then = "not resubmitting" if ctx.args.no_wait else "waiting for them, not resubmitting"
    if found:
        print(f"{len(found)} job(s) of a submission interrupted inside sbatch were still queued ({', '.join(found)})")
    if queued:
        ids = ", ".join(sub.job_id for _, sub in queued)
        print(f"{len(queued)} run(s) already have a queued or running job ({ids}); {then}")
    if busy:
        print(f"{len(busy)} run(s) are being trained by another process; {then}")
    if submitted:
        print(f"submitted {len(submitted)} job(s) ({cluster}); logs in {folder}")
    for job, sub in submitted:
        print(f"  {sub.job_id}  {job.variant.name} seed {job.seed}")
    if ctx.args.no_wait:
        collect = shlex.join(
            [sys.executable, "-m", f"experiments.{name}", *without(argv, "--launcher", *SLURM_ONLY), "--collect"]
        )
        print(f"once they are done, aggregate with:\n  {collect}")
        return False
    waited = submitted + queued + [(job, None) for job in busy]
    wait(waited, ctx.out, ctx.progress, cluster=cluster, resume=command)
    return True


def sbatch(executor, ctx: Context, todo: list[Job], name: str, job_argv: list[str], job_name: str | None) -> list:
    """Submit one job per run (one array); a submission Slurm refuses is one line naming the option it most
    likely refused and Slurm's own words, not submitit's traceback. An interrupt inside it says how the jobs
    it may have queued are found (job_name: Slurm's; the job record holds the submission)."""
    try:  # submitit prints sbatch's stderr too before raising it: said once, in the error line
        with contextlib.redirect_stderr(io.StringIO()), executor.batch():
            return [(job, executor.submit(job_main, name, job_argv, *job.key, ctx.args.gpus_per_run)) for job in todo]
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: sbatch may have queued the jobs without us reading their ids
        if job_name:
            e.jobs_left = interrupted_line(job_name)  # type: ignore[attr-defined]
        raise
    except Exception as e:  # submitit's FailedJobError (sbatch's exit status), or sbatch not there
        if fired_code() is not None:  # an interrupt a library turned into another exception
            if job_name:
                e.jobs_left = interrupted_line(job_name)  # type: ignore[attr-defined]
            raise
        raise ToolkitError(refused_line(ctx.args, e)) from None


def job_command(argv: list[str], out: Path) -> list[str]:
    """The command line a cluster job re-plans from: the user's, less the launcher's options, with --out absolute."""
    return [*without(argv, "--out", "--launcher", *SLURM_ONLY), "--out", str(out), "--no-progress"]


def without(argv: list[str], *options: str) -> list[str]:
    """argv less the given options (and their values, for those that take one). argparse took a unique prefix of
    an option as the option (`--launch slurm`, `--no-w`), so a prefix of exactly one of them is that one too."""
    flags = {"--no-wait", "--collect"}
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        hits = [o for o in options if o == name or (name.startswith("--") and len(name) > 2 and o.startswith(name))]
        full = name if name in options else (hits[0] if len(hits) == 1 else None)
        if full is not None:
            skip = "=" not in arg and full not in flags
            continue
        out.append(arg)
    return out


def _worker_args(argv: list[str]) -> list:
    """The one JSON argument job_main gives a torchrun worker: [module, argv, preset, variant, seed]."""
    try:
        job = json.loads(argv[0]) if len(argv) == 1 else None
    except ValueError:
        job = None
    if not (isinstance(job, list) and len(job) == 5):
        raise ToolkitError(
            "experiments.cluster.launch runs as a torchrun worker of a cluster job (job_main), not as a command; "
            "run python -m experiments.<name>"
        )
    return job


if __name__ == "__main__":  # a torchrun worker of job_main
    try:
        module, argv, preset, variant, seed = _worker_args(sys.argv[1:])
    except ToolkitError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    job_main(module, argv, preset, variant, seed)
