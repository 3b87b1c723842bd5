"""What an experiment plans: named variants of a preset, groups of them, one job per (variant, seed).

Plain types that the runner (experiments.runner.frame), the launcher (experiments.cluster.launch)
and every experiment share; this module imports neither of the first two.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interp.errors import ToolkitError
from training.presets import RunSpec
from training.run_config import variant_name
from training.rundir import RunDir


@dataclass(frozen=True)
class Variant:
    """A named change to the preset: model/train overrides, and an optional model_init(model)."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    model_init: Callable | None = None

    @classmethod
    def of(cls, **overrides: Any) -> Variant:
        """A variant named by the one rule the trainer CLI uses too (training.run_config.variant_name)."""
        return cls(variant_name(overrides), overrides)


@dataclass
class Group:
    """Variants trained on one preset spec for every seed; callbacks(variant, seed) adds trainer callbacks.

    seeds: this group's own seeds instead of --seeds (e.g. a confirmation rerun with three seeds).
    """

    spec: RunSpec
    variants: list[Variant]
    callbacks: Callable[[Variant, int], list] | None = None
    probes: bool = True
    seeds: list[int] | None = None


@dataclass(frozen=True)
class Job:
    group: Group
    variant: Variant
    seed: int

    @functools.cached_property
    def spec(self) -> RunSpec:
        """What this run trains: the group's spec with the variant's overrides and the seed."""
        return self.group.spec.with_overrides({**self.variant.overrides, "seed": self.seed})

    @property
    def key(self) -> tuple[str, str, int]:
        """(preset, variant name, seed): what names this run, and its run directory."""
        return self.group.spec.preset, self.variant.name, self.seed

    def run_dir(self, out: Path) -> RunDir:
        return RunDir.of(out, *self.key)


@dataclass
class Context:
    """What an experiment's plan, analysis and report see."""

    args: argparse.Namespace
    spec: RunSpec
    seeds: list[int]
    out: Path
    corpus: Any = None
    levels: dict[str, Any] | None = None

    @property
    def result_dir(self) -> Path:
        return self.out / self.spec.preset

    @property
    def progress(self) -> bool:
        return not self.args.no_progress

    def reference_levels(self) -> dict[str, Any]:
        """The validation levels, computed once: a plan can need them before the runner prints them (the floor's
        law predictions, written while planning once their fit runs have finished)."""
        from training.reference_levels import validation_levels

        if self.levels is None:
            self.levels = validation_levels(self.spec.model.n_ctx, self.spec.train, self.corpus)
        return self.levels


def plan_jobs(groups: list[Group], seeds: list[int]) -> list[Job]:
    """Every group's variants x its seeds (the group's own, else `seeds`, the command's --seeds)."""
    return [Job(g, v, s) for g in groups for v in g.variants for s in (g.seeds or seeds)]


def all_finished(groups: list[Group], ctx: Context) -> bool:
    """Whether every run of these groups has finished under ctx.out."""
    return all(j.run_dir(ctx.out).finished for j in plan_jobs(groups, ctx.seeds))


def by_variant(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Runs (one dict each, with its "variant") grouped by variant: variants in first-seen order, runs in order."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        grouped.setdefault(r["variant"], []).append(r)
    return grouped


def extend_seeds(seeds: list[int], n: int) -> list[int]:
    """The lowest n of `seeds`, continued past the largest by consecutive integers where it has fewer."""
    ordered = sorted(seeds)
    return ordered[:n] + [ordered[-1] + k for k in range(1, n - len(ordered) + 1)]


def select_variants(groups: list[Group], text: str) -> list[Group]:
    """The groups cut down to the variants --variants names (comma-separated), in the order given."""
    wanted = [w.strip() for w in text.split(",")]
    known = [v.name for g in groups for v in g.variants]
    if not text.strip() or "" in wanted:
        raise ToolkitError(f"--variants {text!r} has an empty entry; name one or more of: {', '.join(known)}")
    repeated = sorted({w for w in wanted if wanted.count(w) > 1})
    if repeated:  # one run counted twice would pass for two seeds (n=2, std 0) in every statistic
        raise ToolkitError(f"--variants names {', '.join(repeated)} more than once; name each variant once")
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ToolkitError(f"unknown variant(s) {unknown}; choose from: {', '.join(known)}")
    picked = [(g, [v for name in wanted for v in g.variants if v.name == name]) for g in groups]
    return [Group(g.spec, variants, g.callbacks, g.probes, g.seeds) for g, variants in picked if variants]


def check_distinct_dirs(jobs: list[Job]) -> None:
    """Two different variants of one preset whose names give one run directory would take turns at it
    (the second refused as "a run of a different configuration" forever): refused before any work."""
    from training.run_config import slug

    seen: dict[tuple[str, str], str] = {}
    specs: dict[tuple[str, str, int], Any] = {}
    for job in jobs:
        key = (job.group.spec.preset, slug(job.variant.name))
        other = seen.setdefault(key, job.variant.name)
        if other != job.variant.name:
            raise ToolkitError(
                f"variants {other!r} and {job.variant.name!r} would share the run directory "
                f"{key[1]}; give values that differ in their names"
            )
        # one name, two configurations (a name that leaves out what differs): the second would be refused as
        # "a run of a different configuration", or read as the first
        first = specs.setdefault((*key, job.seed), job.spec)
        if first != job.spec:
            raise ToolkitError(
                f"variant {job.variant.name!r} names two different configurations (seed "
                f"{job.seed}); its name must say what differs"
            )
