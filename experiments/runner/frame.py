"""One frame for every experiment: an experiment declares, the runner does the rest.

An `Experiment` declares its name, results schema, its own options, its plan
(groups of variants on a preset, run for every seed, with optional per-run
callbacks), its analysis (finished runs + reference levels -> its results),
its results table and its report sections. `Experiment.main(argv)` owns what
every experiment shares:

    shared options     --preset --set --seeds --out --data [--variants] --launcher
                       (+ slurm options) --collect --no-progress --no-report --analyse-only
    validation         every option; a --set key that a variant owns is refused
    runs               one run directory per (preset, variant, seed) (training.rundir),
                       trained locally or submitted through submitit (experiments.cluster.launch)
    results-<name>.json schema, experiment, preset, seeds, config (model, train, overrides,
                       variants), reference_levels, runs (run_dir relative to the file's folder),
                       the experiment's own keys, command, software, train_wall_time_s,
                       wall_time_s, created; with --analyse-only also analysed_from, not_recomputed
    --analyse-only     the analysis on logged runs without checkpoints or training
                       (experiments.runner.analyse_only)
    console, report    the levels line, one results table, the experiment's own text;
                       report.html: a shared introduction, the table, the experiment's sections
    errors             a ToolkitError is one `error:` line and exit 2; Ctrl-C exits 130
                       with the command that resumes (and, waiting for Slurm jobs, their ids:
                       they are not cancelled); a sweep some of whose jobs ended without
                       finishing exits 3 after aggregating the finished runs (wait_jobs)
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from experiments.cluster.launch import add_launcher_arguments, check_launcher_arguments, importable, launch, without
from experiments.cluster.wait_jobs import SweepIncomplete
from experiments.runner.analyse_only import NOT_RECOMPUTABLE
from experiments.runner.text import format_table, levels_line, software_versions, table_figure, validation_words
from experiments.shared.options import check_number as check_number  # re-exported: the experiments import it here
from experiments.shared.options import parse_seeds
from experiments.shared.plan import (
    Context,
    Group,
    Job,
    Variant,
    check_distinct_dirs,
    plan_jobs,
    select_variants,
)
from interp.command.cli import DocParser, command_main, directory_option
from interp.command.signals import interrupt_line, signal_name
from interp.errors import CheckpointError, ToolkitError, one_line
from interp.files.io import remove_stale_temps
from training.budget import check_runnable
from training.presets import PRESETS, RunSpec, check_asked_vocab, parse_overrides, resolve

__all__ = ["Context", "Experiment", "Group", "Job", "Variant", "check_number", "load_record", "run_summary"]


@dataclass
class Experiment:
    name: str  # the module name under experiments/, e.g. "routing_test"
    schema: str
    doc: str  # the module docstring: --help shows it up to "results.json schema"
    plan: Callable[[Context], list[Group]]
    analyse: Callable[[Context, list[dict[str, Any]]], dict[str, Any]]  # must return "runs"
    table: Callable[[dict[str, Any]], tuple[list[str], list[list[str]]]]
    summary: Callable[[dict[str, Any]], str] | None = None  # console text after the table
    sections: Callable[[dict[str, Any], Context], list] | None = None  # report sections after the table
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    check: Callable[[argparse.Namespace], None] | None = None  # raise ToolkitError on a bad option
    owned: dict[str, str] = field(default_factory=dict)  # --set key the variants own -> what to use instead
    variants_option: bool = False  # whether --variants picks a subset
    defaults: Callable[[RunSpec], dict[str, Any]] | None = None  # overrides applied unless --set says otherwise
    title: str = ""
    preface: Callable[[Context, list[Job]], str] | None = None  # printed before any run trains (e.g. its cost)
    default_preset: str = "cpu-quick"
    # The plan may grow once runs finish (plan reads finished run directories, e.g. a confirmation of the
    # cells a first pass put next to a boundary): after launching, the runner plans again and launches what is
    # new, until nothing is. A cluster job re-plans the same way, so it finds its run in the grown plan.
    replan: bool = False
    default_seeds: Callable[[RunSpec], list[int]] | None = None  # seeds without --seeds (else the preset's one)
    # What the analysis reads from the checkpoints, not the logs (--analyse-only): given the options, it turns
    # off what it can and returns {results key: what needs the weights}, or raises ToolkitError when nothing of
    # the analysis is left without them. None: the analysis reads the logged files only.
    without_weights: Callable[[argparse.Namespace], dict[str, str]] | None = None

    @property
    def default_out(self) -> str:
        return f"runs/{self.name}"

    # Named after the experiment, so two experiments sharing an --out (and so its runs) never overwrite
    # each other's results (docs/DESIGN.md contract 3).
    def results_path(self, ctx: Context) -> Path:
        return ctx.result_dir / f"results-{self.name}.json"

    def report_path(self, ctx: Context) -> Path:
        return ctx.result_dir / f"report-{self.name}.html"

    # ----- the command line --------------------------------------------------------------------------
    def parser(self) -> argparse.ArgumentParser:
        p = DocParser(  # an unknown or malformed option: one `error:` line, exit 2 (--help prints the usage)
            prog=f"python -m experiments.{self.name}", description=self.doc.split("results.json schema")[0]
        )
        p.add_argument(
            "--preset",
            default=self.default_preset,
            help=f"one of {', '.join(PRESETS)} (default: {self.default_preset})",
        )
        p.add_argument("--seeds", default=None, help=f"comma-separated seeds (default: {self.seeds_default_text()})")
        p.add_argument(
            "--out",
            default=self.default_out,
            type=directory_option,
            help=f"experiment directory (default: {self.default_out})",
        )
        p.add_argument(
            "--data", help="corpus file or prepared directory (default: $RESIDUAL_DATA_DIR, cache, download)"
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override any preset field for every run (repeatable)",
        )
        if self.variants_option:
            p.add_argument("--variants", help="comma-separated subset of the variant names (default: all)")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument("--no-report", action="store_true", help="skip report.html")
        p.add_argument(
            "--analyse-only",
            metavar="FOLDER",
            type=directory_option,
            help="train nothing: analyse the logged runs in FOLDER (a shipped folder, docs/results/data/..., or an "
            "--out whose checkpoints are gone) with the options recorded with its runs (those given here win, and "
            "where one differs it is said); their logs and the results go to --out; "
            "what needs the weights is refused or listed as not recomputed (experiments.runner.analyse_only)",
        )
        add_launcher_arguments(p)
        if self.add_arguments:
            self.add_arguments(p)
        return p

    def seeds_default_text(self) -> str:
        """What runs without --seeds, said as the default preset gives it (an experiment's default_seeds may train
        many seeds where the bare frame trains the preset's one)."""
        spec = resolve(self.default_preset, {})
        if self.defaults:
            spec = resolve(self.default_preset, self.defaults(spec))
        if not self.default_seeds:
            return f"the preset's, {spec.train.seed}"
        seeds = self.default_seeds(spec)
        span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[0] + len(seeds))) else None
        shown = span if span and len(seeds) > 2 else ",".join(map(str, seeds))
        return f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}, {shown}, at --preset {self.default_preset}"

    def main(self, argv: list[str] | None = None) -> int:
        """The command: one `error:` line and 2 for a refusal, an interrupt's own status, and a reader that
        went away (`| head`) or a full stdout ending it only after its files are written (interp.command.cli)."""
        from interp.command.cli import guarded_output

        return guarded_output(lambda: self._guarded_main(argv))

    def _guarded_main(self, argv: list[str] | None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        start = time.perf_counter()
        return command_main(lambda: self._main(argv, start), lambda code, e: self._interrupted(code, e, argv, start))

    def _interrupted(self, code: int, e: BaseException, argv: list[str], start: float) -> str:
        """The line an interrupt ends the command with (one_line_errors), and SweepIncomplete's `error:` line."""
        if isinstance(e, SweepIncomplete):  # no run finished: nothing to aggregate (else _main aggregated them)
            return f"error: {one_line(e)}"
        # Slurm jobs the interrupted wait leaves running (wait_jobs), an interrupted sbatch's jobs (launch.sbatch);
        # a library may have turned the interrupt into another exception (interp.command.signals.fired_code)
        jobs_left = getattr(e, "jobs_left", "")
        command = shlex.join([sys.executable, "-m", f"experiments.{self.name}", *argv])
        if not importable(self.name):  # declared in a notebook or a test file: no module to name
            command = f"run this experiment again with the same options ({shlex.join(argv)})"
        then = jobs_left or "the interrupted one resumes from its checkpoint"
        return interrupt_line(
            f"interrupted ({signal_name(code)}) after {time.perf_counter() - start:.0f}s; finished runs are "
            f"kept and {then}: {command}"
        )

    def context(self, argv: list[str]) -> tuple[Context, list[Job]]:
        """Parse and check every option, load the corpus, then plan: (context, the jobs)."""
        parser = self.parser()
        args = parser.parse_args(argv)
        if args.analyse_only is not None:  # the options recorded with its runs, less those given here
            from experiments.runner.analyse_only import effective_options, with_recorded_options

            argv = with_recorded_options(
                parser, argv, Path(args.analyse_only), self.name, partial(effective_options, self)
            )
            args = parser.parse_args(argv)
        args.argv = argv  # the command line the runs are planned from (results' "command")
        check_launcher_arguments(args)
        if self.check:
            self.check(args)
        args.not_recomputed = {}
        if getattr(args, "analyse_only", None) is not None:
            if args.launcher != "local" or args.collect:
                raise ToolkitError("--analyse-only trains nothing: --launcher and --collect have nothing to do")
            if self.without_weights:  # refused here, before the corpus is read, where nothing is left
                args.not_recomputed = {k: f"{NOT_RECOMPUTABLE}: {why}" for k, why in self.without_weights(args).items()}
        spec, seeds, user = self.resolved_options(args)
        from training.data import load_corpus

        corpus = load_corpus(spec.train.corpus, spec.train.data_path)
        check_asked_vocab(user, corpus.vocab_size)
        # The data decides the vocabulary: every spec below (results.json's config too) holds the trained d_vocab.
        spec = spec.fit_vocab(corpus.vocab_size)
        ctx = Context(args=args, spec=spec, seeds=seeds, out=Path(args.out), corpus=corpus)
        return ctx, self.jobs(ctx)

    def resolved_options(self, args: argparse.Namespace) -> tuple[RunSpec, list[int], dict[str, Any]]:
        """(the spec, the seeds, the --set overrides) the options resolve to, before the corpus is read."""
        user = parse_overrides(args.set)
        if "seed" in user and args.seeds is not None:  # --seeds decides every run's seed: one would be ignored
            raise ToolkitError("--set seed=... and --seeds both give the seed; give the seeds with --seeds only")
        for key, instead in self.owned.items():
            if key in user:
                raise ToolkitError(f"--set {key}=... would be overridden by this experiment's variants; use {instead}")
        if args.data:
            user["data_path"] = args.data
        spec = resolve(args.preset, user)
        if self.defaults:  # computed from the user's spec, and yielding to the user's own --set
            spec = resolve(args.preset, {**self.defaults(spec), **user})
        seeds = parse_seeds(args.seeds, self.default_seeds(spec) if self.default_seeds else [spec.train.seed])
        return spec, seeds, user

    def jobs(self, ctx: Context) -> list[Job]:
        """The plan's runs: every group's variants x its seeds (the group's own, else --seeds)."""
        vocab = ctx.corpus.vocab_size
        groups = [dataclasses.replace(g, spec=g.spec.fit_vocab(vocab)) for g in self.plan(ctx)]
        if self.variants_option and ctx.args.variants is not None:  # "" is an empty list, not "all"
            groups = select_variants(groups, ctx.args.variants)
        jobs = plan_jobs(groups, ctx.seeds)
        check_distinct_dirs(jobs)
        # Before any work: a size that cannot fit is refused with the estimate (training.budget).
        for s in [ctx.spec, *(j.spec for j in jobs)]:
            check_runnable(s.model, s.train)
        return jobs

    def _main(self, argv: list[str], start: float) -> int:
        ctx, jobs = self.context(argv)
        runs = f"{len(jobs)} run{'s' * (len(jobs) != 1)}"
        source = None
        if ctx.args.analyse_only is not None:
            from experiments.runner import analyse_only

            source = analyse_only.Source.open(ctx.args.analyse_only, ctx.out)
            analyse_only.check_results_file(self.results_path(ctx))
            analyse_only.copy_records(source, ctx, self.name)
            runs += f" from {source.path}, analysed without training or checkpoints"
        ctx.reference_levels()
        print(f"{self.name.replace('_', ' ')}: preset {ctx.spec.preset}, seeds {ctx.seeds}, {runs} -> {ctx.result_dir}")
        if self.preface and source is None:
            print(self.preface(ctx, jobs))

        def ready(todo: list[Job]) -> bool:
            """Make these runs finished (False: submitted without waiting); --analyse-only copies their logs."""
            if source is None:
                return launch(self.name, ctx, todo, argv)
            analyse_only.copy_runs(source, ctx, todo)
            return True

        first = _ready_or_finished_part(ready, jobs)
        if first is None:
            return 0  # submitted without waiting: the launcher printed how to collect
        jobs, incomplete = first
        while self.replan and incomplete is None:
            known = {j.key for j in jobs}
            more = [j for j in self.jobs(ctx) if j.key not in known]
            if not more:
                break
            print(f"{len(more)} more runs, planned from the finished ones")
            if self.preface and source is None:
                print(self.preface(ctx, more))
            if not ready(more):
                return 0
            jobs += more
        if source is not None:
            records = [analyse_only.load_logged(job, ctx) for job in jobs]
            with analyse_only.weights_refused(self.name):
                results = self.results(ctx, jobs, records)
            results.update(analysed_from=str(source.path), not_recomputed=ctx.args.not_recomputed)
        else:
            records = [load_record(job, ctx.out) for job in jobs]
            results = self._aggregate(ctx, jobs, records, incomplete)
        # The command that trains and analyses these runs (an --analyse-only one reads them from elsewhere).
        command = without(ctx.args.argv, "--analyse-only")  # --analyse-only's: with the options recorded with the runs
        results["command"] = shlex.join(["python", "-m", f"experiments.{self.name}", *command])
        results["wall_time_s"] = time.perf_counter() - start
        results_path, report_path = self.results_path(ctx), self.report_path(ctx)
        # What a killed writer of these two left (or of results.json / report.html, which no writer names any
        # more); another experiment's files in this folder are not ours to touch.
        remove_stale_temps(ctx.result_dir, (results_path.name, report_path.name, "results.json", "report.html"))
        report_path.unlink(missing_ok=True)  # an old report never stands beside new results,
        for figure in ctx.result_dir.glob(f"*-{self.name}.svg"):  # nor its static figures (what-NAME.svg)
            figure.unlink(missing_ok=True)
        write_results(results_path, relative_run_dirs(results, ctx.result_dir))
        print()
        print(levels_line(ctx.levels, ctx.spec.train.val_mode))
        print(format_table(*self.table(results)))
        if self.summary:
            print()
            print(self.summary(results))
        for key, why in ctx.args.not_recomputed.items():
            print(f"\n{key}: {why}")
        if not ctx.args.no_report:
            try:
                path = self.write_report(results, ctx)
                print(f"\nreport: {path}")
            except CheckpointError:
                if source is None:
                    raise
                print("\nreport: not written - its figures read the weights, which --analyse-only does not")
        peaks = [r["final"].get("peak_matmul_flops") for r in records if r["final"].get("peak_matmul_flops")]
        peak = f"; matmul peak {max(peaks) / 1e9:.0f} GFLOP/s as the runs measured it" if peaks else ""
        print(f"results: {results_path}  (wall time {time.perf_counter() - start:.0f}s{peak})")
        return _exit_status(incomplete)

    def _aggregate(self, ctx: Context, jobs: list[Job], records: list, incomplete: SweepIncomplete | None) -> dict:
        """self.results; of the finished runs of an incomplete sweep, saying in the file which are missing."""
        if incomplete is None:
            return self.results(ctx, jobs, records)
        try:
            results = self.results(ctx, jobs, records)
        except Exception as err:  # an analysis that needs every run: the sweep's own error says what to do
            raise SweepIncomplete(f"{incomplete}; the finished runs not aggregated alone: {one_line(err)}", []) from err
        results["incomplete"] = {"unfinished": sorted(f"{j.variant.name} seed {j.seed}" for j in incomplete.unfinished)}
        return results

    def results(self, ctx: Context, jobs: list[Job], records: list[dict[str, Any]]) -> dict[str, Any]:
        own = self.analyse(ctx, records)
        variants = {}
        for job in jobs:
            variants.setdefault(job.variant.name, job.variant.overrides)
        config = {
            "model": ctx.spec.model.to_dict(),
            "train": ctx.spec.train.to_dict(),
            "overrides": ctx.spec.overrides,
            "variants": variants,
            **own.pop("config", {}),
        }
        return {
            "schema": self.schema,
            "experiment": self.name,
            "preset": ctx.spec.preset,
            "seeds": ctx.seeds,
            "config": config,
            "reference_levels": ctx.levels,
            **own,
            "software": software_versions(),
            "train_wall_time_s": sum(r["final"]["wall_time_s"] for r in records),
        }

    def write_report(self, results: dict[str, Any], ctx: Context) -> Path:
        from interp.figures.plot_page import save_html

        levels = results["reference_levels"]
        intro = (
            f"{self.title or self.name}: preset {results['preset']}, seeds {results['seeds']}, "
            f"{len(results['runs'])} runs. {validation_words(ctx.spec.train.val_mode)} "
            f"{levels_line(levels, ctx.spec.train.val_mode).capitalize()}."
        )
        overrides = results["config"].get("overrides")
        if overrides:
            intro += f" Overrides for every run: {overrides}."
        sections: list = [intro, ("Results", table_figure(*self.table(results)))]
        if self.sections:
            sections += self.sections(results, ctx)
        return save_html(sections, self.report_path(ctx), title=f"{self.title or self.name} - {results['preset']}")


# ----- the pieces the runner uses (and experiments may too) --------------------------------------------


def _ready_or_finished_part(ready, jobs: list[Job]) -> tuple[list[Job], SweepIncomplete | None] | None:
    """ready(jobs); None when submitted without waiting. Where some jobs died (SweepIncomplete): the finished
    runs, to aggregate before the command exits 3 naming the rest; none finished is the error itself."""
    try:
        return (jobs, None) if ready(jobs) else None
    except SweepIncomplete as e:
        lost = {j.key for j in e.unfinished}
        done = [j for j in jobs if j.key not in lost]
        if not done:
            raise
        print(f"\n{len(done)} finished run(s) aggregated below; {len(lost)} not finished (said above)")
        return done, e


def _exit_status(incomplete: SweepIncomplete | None) -> int:
    if incomplete is None:
        return 0
    print(f"error: {one_line(incomplete)}", file=sys.stderr)
    return incomplete.exit_code


def load_record(job: Job, out: Path) -> dict[str, Any]:
    """A finished run as plain data, labelled with its preset, variant and seed."""
    record = job.run_dir(out).load()
    record.update(preset=job.group.spec.preset, variant=job.variant.name, seed=job.seed)
    return record


def relative_run_dirs(results: Any, base: Path) -> Any:
    """The results with every run_dir relative to base (the results file's folder), as the file records them: a
    results file names its runs wherever its folder is copied (absolute ones in older files stay readable:
    experiments.shipping.ship.run_path)."""
    import os

    if isinstance(results, list):
        return [relative_run_dirs(v, base) for v in results]
    if not isinstance(results, dict):
        return results
    out = {k: relative_run_dirs(v, base) for k, v in results.items()}
    if isinstance(out.get("run_dir"), str):
        out["run_dir"] = Path(os.path.relpath(os.path.abspath(out["run_dir"]), os.path.abspath(base))).as_posix()
    return out


def run_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The per-run metrics every experiment reports."""
    final = record["final"]
    return {
        "variant": record["variant"],
        "seed": record["seed"],
        "run_dir": record["run_dir"],
        "final_val_loss": final["final_val_loss"],
        "best_val_loss": final["best_val_loss"],
        "best_step": final["best_step"],
        "steps": final["steps"],
        "wall_time_s": final["wall_time_s"],
        "tokens_per_s": final["tokens_per_s"],
        "threads": final.get("threads"),  # None for runs trained before final.json recorded it
        "val_curve": record["val_curve"],
        "train_curve": record["train_curve"],
    }


def write_results(path: Path, results: dict[str, Any]) -> None:
    """Strict JSON: the config's infinities (self_bias) are spelled "inf"; any other non-finite number is an error."""
    from datetime import datetime, timezone

    from interp.files.io import NonFiniteError, json_safe, write_json

    results = {
        **results,
        "config": json_safe(results.get("config")),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        write_json(path, results)
    except NonFiniteError as e:
        raise NonFiniteError(
            f"{e}; no result is written from a non-finite number - check the runs it comes "
            "from (their final.json and metrics.jsonl)"
        ) from None
